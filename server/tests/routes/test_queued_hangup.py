"""A client that hangs up while its request waits for a slot or for its model to load leaves at once (section 17)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypnos.types import MemoryTier
from server_harness import call, running, start_leaving
from server_kit import build_app, config


def embedder(fake: dict[str, Any]) -> dict[str, Any]:
    """One-slot fake embeddings model: each input takes token_ms."""
    return {"id": "slow", "modality": "embeddings", "engine": "fake", "fake": {"steps": 1, **fake}}


def embed(inputs: int) -> bytes:
    return json.dumps({"model": "slow", "input": [f"text {i}" for i in range(inputs)]}).encode()


async def until(check: Any, what: str) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {what}")


async def test_a_queued_client_that_hangs_up_frees_its_place_in_the_queue():
    app = build_app(config(models=[embedder({"token_ms": 50})], limits={"max_queue_per_model": 1}))
    records: list[Any] = []
    app.state.hypnos.observers.append(records.append)
    async with running(app):
        state = app.state.hypnos.scheduler.get("slow")
        busy = start_leaving(app, "/v1/embeddings", embed(400))  # 20 s of work holds the only slot
        await until(lambda: state.active_leases == 1, "leased")
        queued = start_leaving(app, "/v1/embeddings", embed(1))
        await until(lambda: state.gate.queued == 1, "queued")
        queued.gone.set()
        await asyncio.wait_for(queued.task, 5)  # left while the slot was still busy
        assert state.gate.queued == 0
        assert state.active_leases == 1
        following = asyncio.ensure_future(call(app, "POST", "/v1/embeddings", body=embed(1), headers=JSON))
        await until(lambda: state.gate.queued == 1 or following.done(), "queued after it")
        assert not following.done()  # its place, not a 429 counting the one that left
        busy.gone.set()
        await asyncio.wait_for(busy.task, 10)
        served = await asyncio.wait_for(following, 10)
        assert served.status == 200, served.body
        assert len(json.loads(served.body)["data"]) == 1
        assert state.active_leases == 0
    (left,) = [r for r in records if r.previous_tier is None]  # the one that never got the model
    assert (left.status, left.error_type, left.error) == (499, "cancelled", "the client went away")
    assert sorted(r.status for r in records) == [200, 499, 499]


async def test_a_client_that_hangs_up_while_its_model_loads_frees_the_lease_and_the_load_completes():
    app = build_app(config(models=[embedder({"token_ms": 1, "load_ms": 5000})]))
    records: list[Any] = []
    app.state.hypnos.observers.append(records.append)
    async with running(app):
        scheduler = app.state.hypnos.scheduler
        state = scheduler.get("slow")
        assert state.tier is MemoryTier.TIER3
        leaving = start_leaving(app, "/v1/embeddings", embed(1))
        await until(lambda: state.active_leases == 1 and state.transition is not None, "loading")
        leaving.gone.set()
        await asyncio.wait_for(leaving.task, 10)
        assert state.active_leases == 0
        assert state.tier is not MemoryTier.TIER1  # it left while the model was still loading
        await scheduler.tiers.settle(state)
        assert state.tier is MemoryTier.TIER1  # the load went on without it
        served = await call(app, "POST", "/v1/embeddings", body=embed(1), headers=JSON)
        assert served.status == 200, served.body
        assert state.active_leases == 0
        assert state.engine.cancelled_requests == 0
    assert [(r.status, r.error_type, r.error) for r in records] == [
        (499, "cancelled", "the client went away"),
        (200, None, None),
    ]


JSON = {"content-type": "application/json"}
