"""507 from every engine: an engine library's own device OOM error, raised in the engine (in its host process or
in the server's), ends as DeviceOutOfMemory: idle models are evicted and the call retried once, streams included
(before their first event), else 507 device_out_of_memory."""

from __future__ import annotations

from typing import Any

import pytest
from host_kit import chat_input, chat_text, hosted_model, hosted_scheduler
from hypnos.engine import DeviceOutOfMemory
from hypnos.scheduler import Scheduler
from hypnos.types import MemoryTier, Modality
from sched_kit import fake_model, make_scheduler

CHAT = Modality.TEXT_GENERATION


async def answer(engine: Any, lease: Any) -> str:
    """A whole chat's text."""
    return "".join([getattr(event, "text", "") async for event in engine.chat(chat_input(), lease.cancel)])


def scheduler_for(where: str, ooms: int) -> Scheduler:
    """An idle model and one whose library runs out of device memory `ooms` times, in hosts or in this process."""
    small = {"layers": 1, "layer_mib": 1}
    if where == "host":
        return hosted_scheduler([hosted_model("idle", **small), hosted_model("a", library_oom=ooms, **small)])
    return make_scheduler([fake_model("idle", **small), fake_model("a", library_oom=ooms, **small)])


@pytest.mark.parametrize("where", ["host", "thread"])
async def test_a_library_oom_evicts_the_idle_models_and_the_retry_answers(where: str) -> None:
    scheduler = scheduler_for(where, 1)
    try:
        await chat_text(scheduler, "idle")
        async with scheduler.lease("a", CHAT) as lease:
            text = await lease.run_with_oom_retry(lambda engine: answer(engine, lease))
        assert text and lease.evicted_models == ["idle"]
        assert scheduler.get("idle").tier != MemoryTier.TIER1
        assert [e.reason for e in scheduler.recent_evictions] == ["device_out_of_memory"]
    finally:
        await scheduler.shutdown()


@pytest.mark.parametrize("where", ["host", "thread"])
async def test_a_library_oom_again_after_the_evictions_is_507(where: str) -> None:
    scheduler = scheduler_for(where, 2)
    try:
        await chat_text(scheduler, "idle")
        async with scheduler.lease("a", CHAT) as lease:
            with pytest.raises(DeviceOutOfMemory) as caught:
                await lease.run_with_oom_retry(lambda engine: answer(engine, lease))
        error = caught.value
        assert (error.status, error.type) == (507, "device_out_of_memory") and "again" in error.message
        assert lease.evicted_models == ["idle"]
    finally:
        await scheduler.shutdown()


@pytest.mark.parametrize("where", ["host", "thread"])
async def test_a_stream_out_of_memory_before_its_first_event_is_started_again(where: str) -> None:
    scheduler = scheduler_for(where, 1)
    try:
        await chat_text(scheduler, "idle")
        async with scheduler.lease("a", CHAT) as lease:
            events, first = await lease.first_with_oom_retry(lambda engine: engine.chat(chat_input(), lease.cancel))
            rest = [getattr(event, "text", "") async for event in events]
        assert first is not None and "".join([getattr(first, "text", ""), *rest])
        assert lease.evicted_models == ["idle"]
    finally:
        await scheduler.shutdown()
