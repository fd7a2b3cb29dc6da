"""Leases with fake engines: one load under racing requests, queue overflow, deadlines, telemetry, cancellation."""

from __future__ import annotations

import asyncio

import pytest
from hypnos.errors import HypnosError
from hypnos.types import MemoryTier, Modality
from sched_kit import ManualClock, fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION
TIMEOUT = 10


async def hold(scheduler, model_id: str, release: asyncio.Event, entered: asyncio.Event | None = None) -> None:
    async with scheduler.lease(model_id, TEXT):
        if entered is not None:
            entered.set()
        await release.wait()


async def test_racing_requests_for_a_cold_model_load_it_once() -> None:
    scheduler = make_scheduler([fake_model("m", load_ms=50, slots=4)])
    engine = scheduler.get("m").engine

    async def one() -> float:
        async with scheduler.lease("m", TEXT) as lease:
            assert lease.previous_tier == MemoryTier.TIER3
            return lease.tier_switch_latency_ms

    switches = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(10))), TIMEOUT)
    assert engine.loads == 1
    assert all(ms > 0 for ms in switches[:4])
    assert scheduler.get("m").tier == MemoryTier.TIER1
    assert scheduler.get("m").total_requests_served == 10
    assert scheduler.counters.promotions == 1


async def test_racing_requests_with_one_slot_also_load_once() -> None:
    scheduler = make_scheduler([fake_model("m", load_ms=30, slots=1)], limits={"max_queue_per_model": 20})

    async def one() -> None:
        async with scheduler.lease("m", TEXT):
            await asyncio.sleep(0)

    await asyncio.wait_for(asyncio.gather(*(one() for _ in range(8))), TIMEOUT)
    assert scheduler.get("m").engine.loads == 1


async def test_telemetry_of_a_cold_and_a_warm_request() -> None:
    scheduler = make_scheduler([fake_model("m", load_ms=20)])
    async with scheduler.lease("m", TEXT) as lease:
        telemetry = lease.telemetry(inference_ms=5.0)
    assert telemetry.previous_tier == MemoryTier.TIER3
    assert telemetry.tier_switch_latency_ms >= 15
    assert telemetry.tier_switch_phases is not None and telemetry.tier_switch_phases.total_ms is not None
    assert telemetry.placement.primary_tier == MemoryTier.TIER1
    assert telemetry.placement.allocated_context_len == 1024
    assert telemetry.engine.queue_ms is not None
    assert telemetry.evicted_models == []
    async with scheduler.lease("m", TEXT) as lease:
        warm = lease.telemetry()
    assert warm.previous_tier == MemoryTier.TIER1
    assert warm.tier_switch_latency_ms == 0.0 and warm.tier_switch_phases is None


async def test_queue_overflow_is_429_without_retry_after() -> None:
    scheduler = make_scheduler([fake_model("m")], limits={"max_queue_per_model": 2})
    release, entered = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold(scheduler, "m", release, entered))
    await entered.wait()
    waiters = [asyncio.create_task(hold(scheduler, "m", release)) for _ in range(2)]
    await asyncio.sleep(0.01)
    assert scheduler.get("m").waiting == 2
    with pytest.raises(HypnosError) as caught:
        async with scheduler.lease("m", TEXT):
            pass
    assert (caught.value.status, caught.value.type, caught.value.retry_after) == (429, "model_busy", None)
    assert "Retry-After" not in caught.value.response_headers()
    assert scheduler.counters.admissions_rejected == 1
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, *waiters), TIMEOUT)
    state = scheduler.get("m")
    assert (state.active_leases, state.gate.in_use, state.waiting) == (0, 0, 0)


async def test_estimated_wait_and_deadline_refusal() -> None:
    scheduler = make_scheduler([fake_model("m", slots=1)], limits={"max_queue_per_model": 10})
    state = scheduler.get("m")
    await scheduler.move("m", MemoryTier.TIER1)
    release, entered = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold(scheduler, "m", release, entered))
    await entered.wait()
    # busy and never measured: no estimate, so no deadline can refuse
    assert scheduler.estimated_wait_ms("m") is None

    async def quick():
        async with scheduler.lease("m", TEXT, deadline_ms=1) as lease:
            return lease.estimated_wait_ms

    queued = asyncio.create_task(quick())
    await asyncio.sleep(0.01)
    state.service_ms_avg = 1200.0  # as if measured
    assert scheduler.estimated_wait_ms("m") == 2400  # one running + one queued, one slot
    with pytest.raises(HypnosError) as caught:
        async with scheduler.lease("m", TEXT, deadline_ms=2000):
            pass
    error = caught.value
    assert (error.status, error.type) == (503, "deadline_unmeetable")
    assert error.retry_after is not None and abs(error.retry_after * 1000 - 2400) < 1000
    assert error.response_headers()["Retry-After"] == str(error.retry_after)
    release.set()
    assert await asyncio.wait_for(queued, TIMEOUT) is None
    await asyncio.wait_for(holder, TIMEOUT)
    async with scheduler.lease("m", TEXT, deadline_ms=10) as lease:
        assert lease.estimated_wait_ms == 0


async def test_deadline_counts_the_load_of_a_cold_model() -> None:
    scheduler = make_scheduler([fake_model("m")])
    scheduler.get("m").reload_ms[MemoryTier.TIER3] = 4200.0
    assert scheduler.estimated_wait_ms("m") == 4200
    with pytest.raises(HypnosError) as caught:
        async with scheduler.lease("m", TEXT, deadline_ms=1000):
            pass
    assert caught.value.type == "deadline_unmeetable" and caught.value.retry_after == 5
    assert scheduler.get("m").engine.loads == 0  # refused at once, nothing loaded


async def test_shed_profile_is_an_implicit_deadline() -> None:
    scheduler = make_scheduler([fake_model("m")], server={"profile": "voice_assistant"}, limits={"overload": "shed"})
    scheduler.get("m").reload_ms[MemoryTier.TIER3] = 1600.0
    with pytest.raises(HypnosError) as caught:
        async with scheduler.lease("m", TEXT):
            pass
    assert caught.value.type == "deadline_unmeetable"
    scheduler.get("m").reload_ms[MemoryTier.TIER3] = 1400.0
    async with scheduler.lease("m", TEXT) as lease:
        assert lease.estimated_wait_ms == 1400


async def test_queue_profile_does_not_shed() -> None:
    scheduler = make_scheduler([fake_model("m")], server={"profile": "voice_assistant"})
    scheduler.get("m").reload_ms[MemoryTier.TIER3] = 60_000.0
    async with scheduler.lease("m", TEXT):
        pass


async def test_unknown_disabled_and_wrong_modality() -> None:
    scheduler = make_scheduler([fake_model("m")])
    with pytest.raises(HypnosError) as caught:
        async with scheduler.lease("nope", TEXT):
            pass
    assert caught.value.type == "model_not_found"
    with pytest.raises(HypnosError) as caught:
        async with scheduler.lease("m", Modality.EMBEDDINGS):
            pass
    assert caught.value.status == 400


async def test_release_on_exception_and_cancellation() -> None:
    scheduler = make_scheduler([fake_model("m", load_ms=50)], limits={"max_queue_per_model": 5})
    state = scheduler.get("m")
    with pytest.raises(RuntimeError):
        async with scheduler.lease("m", TEXT):
            raise RuntimeError("boom")
    assert (state.active_leases, state.gate.in_use) == (0, 0)
    await scheduler.move("m", MemoryTier.TIER3)
    # cancelled while the model loads: the load finishes in the background, the lease is released
    task = asyncio.create_task(hold(scheduler, "m", asyncio.Event()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (state.active_leases, state.gate.in_use) == (0, 0)
    await asyncio.wait_for(scheduler.tiers.settle(state), TIMEOUT)
    assert state.tier == MemoryTier.TIER1
    # cancelled while queued
    release, entered = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold(scheduler, "m", release, entered))
    await entered.wait()
    queued = asyncio.create_task(hold(scheduler, "m", release))
    await asyncio.sleep(0.01)
    assert state.waiting == 1
    queued.cancel()
    await asyncio.sleep(0)
    assert state.waiting == 0
    release.set()
    await asyncio.wait_for(holder, TIMEOUT)
    assert (state.active_leases, state.gate.in_use, state.waiting) == (0, 0, 0)


async def test_service_time_and_rate_are_measured() -> None:
    clock = ManualClock()
    scheduler = make_scheduler([fake_model("m")], clock=clock)
    for _ in range(3):
        async with scheduler.lease("m", TEXT):
            await asyncio.sleep(0.01)
    state = scheduler.get("m")
    assert state.service_ms is not None and state.service_ms >= 5
    assert state.rate.per_minute(clock()) > 0
    clock.advance(3600)
    assert state.rate.per_minute(clock()) < 0.01


async def test_cancellation_inside_the_lease_sets_the_cancel_token() -> None:
    scheduler = make_scheduler([fake_model("m")])
    seen = []

    async def request() -> None:
        async with scheduler.lease("m", TEXT) as lease:
            seen.append(lease)
            await asyncio.sleep(10)

    task = asyncio.create_task(request())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen[0].cancel.cancelled
    assert scheduler.get("m").active_leases == 0


async def test_a_lease_holds_every_modality_the_request_needs() -> None:
    seeing = {**fake_model("seeing"), "modalities": ["vision"]}
    both = {**fake_model("both"), "modalities": ["vision", "speech_to_text"]}
    scheduler = make_scheduler([seeing, both])
    needed = [TEXT, Modality.VISION, Modality.SPEECH_TO_TEXT]
    async with scheduler.lease("both", needed) as lease:
        assert lease.modalities == needed
    with pytest.raises(HypnosError) as caught:
        async with scheduler.lease("seeing", needed):
            pass
    assert caught.value.status == 400 and "speech_to_text" in caught.value.message
    assert scheduler.get("seeing").active_leases == 0


async def test_modalities_an_engine_finds_in_its_files_are_served_without_changing_the_config() -> None:
    from hypnos.testing.fake_engine import FakeEngine

    class HearingEngine(FakeEngine):
        def served_modalities(self) -> list[Modality]:
            return [*self.model.all_modalities, Modality.SPEECH_TO_TEXT]

    from dataclasses import replace

    scheduler = make_scheduler([fake_model("m")])
    state = scheduler.get("m")
    scheduler.engine_kinds["fake"] = replace(scheduler.engine_kinds["fake"], factory=HearingEngine)
    state = scheduler._make_state(state.config)
    assert state.modalities == [TEXT, Modality.SPEECH_TO_TEXT]
    assert state.config.all_modalities == [TEXT]
