"""The scheduler at a server's stop: new leases refused (503), leases in flight ended on demand, unloading bounded."""

from __future__ import annotations

import asyncio

import pytest
from hypnos.chat import ChatInput, InputMessage, TextPart
from hypnos.errors import HypnosError
from hypnos.types import MemoryTier, Modality
from sched_kit import fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION


def chat_input() -> ChatInput:
    return ChatInput(messages=[InputMessage(role="user", parts=[TextPart(text="hello")])], max_tokens=1000)


async def stream_until_cancelled(scheduler, started: asyncio.Event) -> str:  # type: ignore[no-untyped-def]
    """A long chat on `m`; the finish reason it ends with."""
    async with scheduler.lease("m", TEXT) as lease:
        reason = ""
        async for event in lease.engine.chat(chat_input(), lease.cancel):
            started.set()
            reason = getattr(event, "finish_reason", reason)
        return reason


async def test_a_stopping_scheduler_refuses_new_leases_with_503_and_lets_those_in_flight_run() -> None:
    scheduler = make_scheduler([fake_model("m", tokens=1000, token_ms=5), fake_model("other")])
    started = asyncio.Event()
    running = asyncio.create_task(stream_until_cancelled(scheduler, started))
    await started.wait()
    scheduler.stop_admitting()
    for model_id in ("m", "other"):
        with pytest.raises(HypnosError) as refused:
            async with scheduler.lease(model_id, TEXT):
                pass
        assert (refused.value.status, refused.value.type) == (503, "model_not_available")
        assert "shutting down" in refused.value.message and refused.value.retry_after == 5
    assert not running.done() and len(scheduler.live_leases) == 1  # the chat in flight goes on
    assert await scheduler.end_in_flight(settle_secs=5.0) == 1
    assert await running == "cancelled"
    assert not scheduler.live_leases and scheduler.get("m").active_leases == 0


async def test_a_request_queued_behind_the_slot_is_refused_when_the_stop_begins_meanwhile() -> None:
    scheduler = make_scheduler([fake_model("m", tokens=1000, token_ms=5, slots=1)])
    started = asyncio.Event()
    running = asyncio.create_task(stream_until_cancelled(scheduler, started))
    await started.wait()

    async def queued() -> None:
        async with scheduler.lease("m", TEXT):
            pass

    waiting = asyncio.create_task(queued())
    await asyncio.sleep(0.05)
    assert not waiting.done()  # queued for the model's one slot
    scheduler.stop_admitting()
    await scheduler.end_in_flight(settle_secs=5.0)
    with pytest.raises(HypnosError) as refused:
        await waiting
    assert refused.value.status == 503 and "shutting down" in refused.value.message
    assert await running == "cancelled"
    assert scheduler.get("m").gate.in_use == 0


async def test_leases_leave_the_live_set_on_every_exit() -> None:
    scheduler = make_scheduler([fake_model("m")])
    async with scheduler.lease("m", TEXT) as lease:
        assert scheduler.live_leases == {lease}
    assert not scheduler.live_leases
    with pytest.raises(RuntimeError):
        async with scheduler.lease("m", TEXT):
            raise RuntimeError("the route failed")
    assert not scheduler.live_leases


async def test_shutdown_unloads_every_model_within_its_bound() -> None:
    scheduler = make_scheduler([fake_model("a", initial_tier="tier1_gpu_vram"), fake_model("b")])
    await scheduler.stage_startup()
    assert scheduler.get("a").tier == MemoryTier.TIER1
    await scheduler.shutdown(within=5.0)
    assert {state.tier for state in scheduler.models()} == {MemoryTier.TIER3}
    assert scheduler.stopping


async def test_a_request_waiting_on_a_load_when_the_stop_begins_gets_503_once_the_load_ends() -> None:
    scheduler = make_scheduler([fake_model("m", load_ms=300)])

    async def use() -> None:
        async with scheduler.lease("m", TEXT):
            pass

    waiting = asyncio.create_task(use())
    await asyncio.sleep(0.05)
    assert scheduler.get("m").transition is not None  # loading for the request
    scheduler.stop_admitting()
    with pytest.raises(HypnosError) as refused:
        await waiting
    assert refused.value.status == 503 and "shutting down" in refused.value.message
    assert not scheduler.live_leases and scheduler.get("m").gate.in_use == 0
