"""Property-based tests: random models, budgets and request sequences keep the scheduler's invariants.

- booked bytes never exceed a tier's budget (checked after every booking), nor with the parked KV states added
  (checked after every park and every operation);
- a model in use by a request is never demoted, unloaded or moved (checked in the engine's demote/unload);
- every lease is released, also on exceptions and cancellation;
- no request waits forever (every operation runs under a timeout; a timeout fails the example);
- models added, replaced and removed at runtime keep all of the above, and a lease never holds a retired state.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypnos.chat import InputMessage, TextPart
from hypnos.config import settings_from_mapping
from hypnos.engine import CancelToken, ChatInput, DeviceOutOfMemory
from hypnos.errors import HypnosError
from hypnos.scheduler import Scheduler
from hypnos.types import MemoryTier, Modality
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_kit import fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION
OP_TIMEOUT = 20.0
CHAT = ChatInput(messages=[InputMessage(role="user", parts=[TextPart(text="hello")])], max_tokens=1)

model_specs = st.fixed_dictionaries(
    {
        "layers": st.integers(1, 6),
        "layer_mib": st.integers(10, 300),
        "slots": st.integers(1, 3),
        "priority": st.sampled_from(["low", "normal", "high", "realtime_pinned"]),
        "load_ms": st.sampled_from([0.0, 1.0, 3.0]),
        "fail_load": st.sampled_from([False, False, False, False, True]),
        "initial_tier": st.sampled_from(["tier1_gpu_vram", "tier2_pinned_ram", "tier3_nvme_ssd"]),
        "moe": st.booleans(),
        "park_mib": st.sampled_from([0, 100, 400, 1200]),
    }
)

operations = st.one_of(
    st.tuples(
        st.just("lease"),
        st.integers(0, 5),
        st.sampled_from([0.0, 1.0, 4.0]),
        st.sampled_from(["ok", "ok", "raise", "cancel", "oom"]),
    ),
    st.tuples(st.just("move"), st.integers(0, 5), st.sampled_from(list(MemoryTier))),
    st.tuples(st.just("toggle"), st.integers(0, 5)),
    st.tuples(st.just("pause"), st.sampled_from([0.0, 1.0, 2.0])),
    st.tuples(st.sampled_from(["add", "replace", "remove"]), st.integers(0, 7), st.sampled_from([0.0, 0.002, 5.0])),
)


def runtime_model(model_id: str, layer_mib: int):  # type: ignore[no-untyped-def]
    """A ModelConfig for a model added or replacing one while the scheduler runs."""
    raw = fake_model(model_id, layers=2, layer_mib=layer_mib, slots=2, load_ms=1.0)
    return settings_from_mapping({"models": [raw]}).models[0]


def build(specs: list[dict[str, Any]], vram_mib: int, ram_mib: int, ratio: float, cap_mib: int | None) -> Scheduler:
    models = []
    for index, spec in enumerate(specs):
        extra = {"expert_bytes_per_layer": spec["layer_mib"] * 2**19} if spec["moe"] else {}
        models.append(
            fake_model(
                f"m{index}",
                layers=spec["layers"],
                layer_mib=spec["layer_mib"] // 2 if spec["moe"] else spec["layer_mib"],
                slots=spec["slots"],
                priority=spec["priority"],
                load_ms=spec["load_ms"],
                fail_load=spec["fail_load"],
                initial_tier=spec["initial_tier"],
                park_bytes=spec["park_mib"] * 2**20,
                **extra,
            )
            | ({"moe_offload": "auto"} if spec["moe"] else {})
        )
    hardware: dict[str, Any] = {"min_gpu_layer_ratio": ratio, "kv_park": {"enabled": True}}
    if cap_mib is not None:
        hardware["max_process_memory_bytes"] = cap_mib * 2**20
    limits = {"max_queue_per_model": 3}
    return make_scheduler(models, vram_mib=vram_mib, ram_mib=ram_mib, hardware=hardware, limits=limits)


class Invariants:
    """Hooks into the scheduler and its engines that assert the invariants as things happen."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.in_use: Counter[str] = Counter()
        self.violations: list[str] = []
        tiers = scheduler.tiers
        original_book = tiers.book

        def checked_book(state, plan) -> None:  # type: ignore[no-untyped-def]
            original_book(state, plan)
            self.check_budgets()

        tiers.book = checked_book  # type: ignore[method-assign]
        store = scheduler.kv_park
        original_park = store.park

        def checked_park(model_id, layout, slots) -> bool:  # type: ignore[no-untyped-def]
            with store.lock:
                parked = original_park(model_id, layout, slots)
                self.check_parked()
                return parked

        store.park = checked_park  # type: ignore[method-assign]
        for state in scheduler.models():
            self.wrap_engine(state)

    def wrap_engine(self, state) -> None:  # type: ignore[no-untyped-def]
        engine = state.engine
        original_demote = engine.demote

        async def demote(tier):  # type: ignore[no-untyped-def]
            if self.in_use[state.id]:
                self.violations.append(f"{state.id} demoted to {tier} while in use")
            await original_demote(tier)

        engine.demote = demote  # unload() calls demote(TIER3)

    def check_budgets(self) -> None:
        tiers = self.scheduler.tiers
        budgets = self.scheduler.budgets
        models = self.scheduler.models()
        if tiers.booked_tier1 != sum(s.booked.vram_bytes for s in models):
            self.violations.append("tier-1 total out of step with the bookings")
        if tiers.booked_tier2 != sum(s.booked.pinned_ram_bytes for s in models):
            self.violations.append("tier-2 total out of step with the bookings")
        if tiers.booked_tier1 > budgets.tier1_bytes:
            self.violations.append(f"tier 1 over budget: {tiers.booked_tier1} > {budgets.tier1_bytes}")
        if tiers.booked_tier2 > budgets.tier2_bytes:
            self.violations.append(f"tier 2 over budget: {tiers.booked_tier2} > {budgets.tier2_bytes}")
        cap = budgets.process_cap_bytes
        if cap is not None and tiers.booked_process > cap:
            self.violations.append(f"process cap exceeded: {tiers.booked_process} > {cap}")

    def check_parked(self) -> None:
        """The bookings plus the parked KV states fit tier 2 and the process cap (between bookings)."""
        tiers, budgets = self.scheduler.tiers, self.scheduler.budgets
        if tiers.used_tier2 > budgets.tier2_bytes:
            self.violations.append(f"tier 2 over budget with parked KV: {tiers.used_tier2} > {budgets.tier2_bytes}")
        cap = budgets.process_cap_bytes
        if cap is not None and tiers.used_process > cap:
            self.violations.append(f"process cap exceeded with parked KV: {tiers.used_process} > {cap}")


async def run_lease(scheduler: Scheduler, checks: Invariants, model_id: str, hold_ms: float, mode: str) -> None:
    async with scheduler.lease(model_id, TEXT) as lease:
        state = scheduler.get(model_id)
        if state.engine is not lease.engine:
            checks.violations.append(f"{model_id} leased an engine that is no longer the model's")
        checks.in_use[model_id] += 1
        try:
            if state.tier != MemoryTier.TIER1 or state.transition is not None:
                checks.violations.append(f"{model_id} leased while not resident in tier 1")
            if mode == "oom":
                calls = []

                async def maybe_oom(_engine) -> None:  # type: ignore[no-untyped-def]
                    calls.append(1)
                    if len(calls) == 1:
                        raise DeviceOutOfMemory()

                await lease.run_with_oom_retry(maybe_oom)
            async for _ in lease.engine.chat(CHAT, CancelToken()):  # a conversation the engine may park
                pass
            await asyncio.sleep(hold_ms / 1000)
            if mode == "raise":
                raise RuntimeError("request failed")
            if state.tier != MemoryTier.TIER1 or state.placement is not lease.placement:
                checks.violations.append(f"{model_id} moved while leased")
        finally:
            checks.in_use[model_id] -= 1


async def run_op(scheduler: Scheduler, checks: Invariants, op: tuple, count: int) -> None:
    kind = op[0]
    model_id = f"m{op[1] % count}" if kind != "pause" else ""
    if kind == "pause":
        await asyncio.sleep(op[1] / 1000)
    elif kind == "lease":
        _, _, hold_ms, mode = op
        work = asyncio.ensure_future(run_lease(scheduler, checks, model_id, hold_ms, mode))
        if mode == "cancel":
            await asyncio.sleep(0.001)
            work.cancel()
        await work
    elif kind == "move":
        await scheduler.move(model_id, op[2])
    elif kind == "toggle":
        state = scheduler.get(model_id)
        await scheduler.set_enabled(model_id, not state.enabled)
    else:
        await run_pool_change(scheduler, checks, kind, f"m{op[1]}", op[2])
    checks.check_parked()


async def run_pool_change(scheduler: Scheduler, checks: Invariants, kind: str, model_id: str, drain: float) -> None:
    if kind == "add":
        checks.wrap_engine(await scheduler.pool.add(runtime_model(model_id, 40)))
    elif kind == "replace":
        checks.wrap_engine(await scheduler.pool.replace(model_id, runtime_model(model_id, 60), drain))
    else:
        old = await scheduler.pool.remove(model_id, drain)
        if old.tier != MemoryTier.TIER3 or old.booked.vram_bytes or old.booked.pinned_ram_bytes:
            checks.violations.append(f"{model_id} removed while still loaded")


async def scenario(specs, vram_mib, ram_mib, ratio, cap_mib, ops) -> list[str]:  # type: ignore[no-untyped-def]
    scheduler = build(specs, vram_mib, ram_mib, ratio, cap_mib)
    checks = Invariants(scheduler)
    await asyncio.wait_for(scheduler.stage_startup(), OP_TIMEOUT)
    tasks = []
    for op in ops:
        tasks.append(asyncio.create_task(asyncio.wait_for(run_op(scheduler, checks, op, len(specs)), OP_TIMEOUT)))
        await asyncio.sleep(0)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, TimeoutError):
            checks.violations.append("an operation waited forever")
        elif isinstance(result, BaseException) and not isinstance(
            result, HypnosError | RuntimeError | asyncio.CancelledError
        ):
            checks.violations.append(f"unexpected {result!r}")
    for state in scheduler.models():
        await asyncio.wait_for(scheduler.tiers.settle(state), OP_TIMEOUT)
        if state.active_leases or state.gate.in_use or state.gate.queued:
            checks.violations.append(f"{state.id} still leased at the end")
        if state.tier == MemoryTier.TIER3 and (state.booked.vram_bytes or state.booked.pinned_ram_bytes):
            checks.violations.append(f"{state.id} in tier 3 but still booked")
        if state.tier != state.booked.primary_tier:
            checks.violations.append(f"{state.id} booked for {state.booked.primary_tier} but in {state.tier}")
    checks.check_budgets()
    checks.check_parked()
    await asyncio.wait_for(scheduler.shutdown(), OP_TIMEOUT)
    if scheduler.tiers.booked_tier1 or scheduler.tiers.booked_tier2:
        checks.violations.append("bookings left after shutdown")
    return checks.violations


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(model_specs, min_size=1, max_size=5),
    vram_mib=st.integers(200, 2500),
    ram_mib=st.integers(400, 6000),
    ratio=st.sampled_from([0.25, 0.5, 1.0]),
    cap_mib=st.one_of(st.none(), st.integers(300, 5000)),
    ops=st.lists(operations, min_size=1, max_size=30),
)
def test_random_sequences_keep_the_invariants(specs, vram_mib, ram_mib, ratio, cap_mib, ops) -> None:  # type: ignore[no-untyped-def]
    violations = asyncio.run(scenario(specs, vram_mib, ram_mib, ratio, cap_mib, ops))
    assert violations == []
