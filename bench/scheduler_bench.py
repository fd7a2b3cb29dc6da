"""Scheduler hot paths: lease acquire/release on a resident model, and the eviction choice among 1,000 models.

Run from the repo root: `python -m bench.scheduler_bench [--rounds N]`. Prints microseconds per operation, the
targets (lease <= 50 us, eviction decision with its snapshot <= 1 ms) and ratios against same-run baselines: a bare
asyncio.Semaphore acquire/release for the lease, and a plain sort of the same 1,000 candidates for the eviction.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from hypnos.config import MiB, settings_from_mapping
from hypnos.hardware import StaticHardware
from hypnos.scheduler import Scheduler
from hypnos.scheduler.eviction import EvictionCandidate, choose_victims
from hypnos.testing import fake_engine_kind
from hypnos.types import MemoryTier, Modality

LEASE_TARGET_US = 50.0
EVICTION_TARGET_US = 1000.0


def _best_of(samples: list[float]) -> tuple[float, float]:
    """(median, minimum) of per-operation times in microseconds."""
    return statistics.median(samples), min(samples)


async def _semaphore_baseline(rounds: int, batch: int) -> list[float]:
    semaphore = asyncio.Semaphore(4)
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(batch):
            async with semaphore:
                pass
        samples.append((time.perf_counter() - started) / batch * 1e6)
    return samples


async def _lease_loop(rounds: int, batch: int) -> list[float]:
    raw = {
        "models": [
            {"id": "m", "modality": "text_generation", "engine": "fake", "slots": 4, "fake": {"layers": 4}},
        ]
    }
    scheduler = Scheduler(
        settings_from_mapping(raw), {"fake": fake_engine_kind()}, hardware=StaticHardware(vram_bytes=4096 * MiB)
    )
    await scheduler.move("m", MemoryTier.TIER1)
    text = Modality.TEXT_GENERATION
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(batch):
            async with scheduler.lease("m", text):
                pass
        samples.append((time.perf_counter() - started) / batch * 1e6)
    await scheduler.shutdown()
    return samples


def _candidates(count: int, seed: int = 7) -> list[EvictionCandidate]:
    rng = random.Random(seed)
    return [
        EvictionCandidate(
            model_id=f"model-{i}",
            priority_rank=rng.randrange(3),
            cost=rng.uniform(0, 10_000),
            tier1_bytes=rng.randrange(1, 64) * MiB,
            tier2_bytes=0,
            process_bytes=0,
            warm_bytes=rng.randrange(1, 64) * MiB,
            warm_process_bytes=0,
            last_used=rng.uniform(0, 1000),
        )
        for i in range(count)
    ]


def _eviction(rounds: int, count: int) -> tuple[list[float], list[float]]:
    candidates = _candidates(count)
    need = sum(c.tier1_bytes for c in candidates) // 2  # about half of them must go
    choice, baseline = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        victims = choose_victims(candidates, need_tier1=need, spare_tier2=8 * 1024 * MiB)
        choice.append((time.perf_counter() - started) * 1e6)
        assert victims
        started = time.perf_counter()
        sorted(candidates, key=lambda c: c.cost)
        baseline.append((time.perf_counter() - started) * 1e6)
    return choice, baseline


async def _candidate_snapshot(rounds: int, count: int) -> tuple[list[float], list[float], list[float]]:
    """The snapshot (candidate list from `count` configured models) alone, and the whole decision: snapshot + choice."""
    models = [
        {"id": f"m{i}", "modality": "text_generation", "engine": "fake", "fake": {"layers": 1, "layer_bytes": MiB}}
        for i in range(count + 1)
    ]
    scheduler = Scheduler(
        settings_from_mapping({"models": models}),
        {"fake": fake_engine_kind()},
        hardware=StaticHardware(vram_bytes=count * 4 * MiB),
    )
    rng = random.Random(11)
    for state in scheduler.models()[:count]:
        await scheduler.move(state.id, MemoryTier.TIER1)
        for _ in range(rng.randrange(1, 5)):  # a request rate, so every candidate's cost is computed
            state.rate.hit(scheduler.clock())
    newcomer = scheduler.get(f"m{count}")
    tiers = scheduler.tiers
    need = sum(c.tier1_bytes for c in tiers.candidates(exclude=newcomer)) // 2  # the worst case: half must go
    samples, decisions, sorts = [], [], []
    for _ in range(rounds):
        started = time.perf_counter()
        tiers.candidates(exclude=newcomer)
        samples.append((time.perf_counter() - started) * 1e6)
        started = time.perf_counter()
        victims = choose_victims(tiers.candidates(exclude=newcomer), need_tier1=need, spare_tier2=8 * 1024 * MiB)
        decisions.append((time.perf_counter() - started) * 1e6)
        assert victims
        started = time.perf_counter()
        sorted(scheduler.models(), key=lambda state: state.last_used)  # the baseline: one sort of the same models
        sorts.append((time.perf_counter() - started) * 1e6)
    await scheduler.shutdown()
    return samples, decisions, sorts


def main() -> None:
    """Run both measurements and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--models", type=int, default=1000)
    args = parser.parse_args()

    baseline = asyncio.run(_semaphore_baseline(args.rounds, args.batch))
    leases = asyncio.run(_lease_loop(args.rounds, args.batch))
    lease_med, lease_min = _best_of(leases)
    base_med, base_min = _best_of(baseline)
    print("lease acquire+release on a resident model")
    print(
        f"  hypnos lease           median {lease_med:8.2f} us   best {lease_min:8.2f} us   "
        f"target <= {LEASE_TARGET_US} us"
    )
    print(f"  asyncio.Semaphore      median {base_med:8.2f} us   best {base_min:8.2f} us   (baseline)")
    verdict = "OK" if lease_med <= LEASE_TARGET_US else "MISSED"
    print(f"  ratio lease/baseline   {lease_med / base_med:8.2f}x   {verdict}")

    choice, sort_only = _eviction(args.rounds, args.models)
    choice_med, choice_min = _best_of(choice)
    sort_med, sort_min = _best_of(sort_only)
    print(f"eviction choice among {args.models} models")
    print(
        f"  choose_victims         median {choice_med:8.2f} us   best {choice_min:8.2f} us   "
        f"target <= {EVICTION_TARGET_US} us"
    )
    print(f"  sorted() by cost       median {sort_med:8.2f} us   best {sort_min:8.2f} us   (baseline)")
    verdict = "OK" if choice_med <= EVICTION_TARGET_US else "MISSED"
    print(f"  ratio choice/baseline  {choice_med / sort_med:8.2f}x   {verdict}")
    snapshots, decisions, sorts = asyncio.run(_candidate_snapshot(args.rounds, args.models))
    snapshot_med, snapshot_min = _best_of(snapshots)
    print(f"  candidate snapshot     median {snapshot_med:8.2f} us   best {snapshot_min:8.2f} us   (state->list)")
    decision_med, decision_min = _best_of(decisions)
    verdict = "OK" if decision_med <= EVICTION_TARGET_US else "MISSED"
    print(
        f"  decision (snapshot+choice, half evicted) median {decision_med:8.2f} us   best {decision_min:8.2f} us   "
        f"target <= {EVICTION_TARGET_US} us   {verdict}"
    )
    sorts_med, sorts_min = _best_of(sorts)
    print(f"  sorted() of the models median {sorts_med:8.2f} us   best {sorts_min:8.2f} us   (baseline, interleaved)")
    print(f"  ratio decision/sorted() {decision_med / sorts_med:7.2f}x   (best {decision_min / sorts_min:.2f}x)")


if __name__ == "__main__":
    main()
