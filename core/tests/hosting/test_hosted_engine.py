"""Engines in host processes: the same answers as in the server's process, crashes and hangs contained."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from host_kit import alive, chat_input, chat_text, host_pid, hosted_model, hosted_scheduler
from hypnos.engine import CancelToken, SpeechInput
from hypnos.errors import HypnosError
from hypnos.types import MemoryTier, Modality
from sched_kit import fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION


async def test_a_hosted_engine_answers_as_the_engine_in_this_process() -> None:
    local_model = {**fake_model("m", layer_mib=1, tokens=6), "modalities": [m.value for m in Modality]}
    hosted, local = hosted_scheduler([hosted_model("m", tokens=6)]), make_scheduler([local_model])
    try:
        assert await chat_text(hosted, "m", "a question") == await chat_text(local, "m", "a question")
        pid = host_pid(hosted, "m")
        assert pid is not None and pid != os.getpid() and alive(pid)
        async with hosted.lease("m", Modality.EMBEDDINGS) as lease:
            far = await lease.engine.embed(["one", "two"], lease.cancel)
        async with local.lease("m", Modality.EMBEDDINGS) as lease:
            near = await lease.engine.embed(["one", "two"], lease.cancel)
        assert far.vectors == near.vectors
        async with hosted.lease("m", Modality.TEXT_TO_SPEECH) as lease:
            chunks = [c async for c in lease.engine.speak(SpeechInput(text="hi there", voice="a"), lease.cancel)]
        assert chunks and all(chunk.pcm16 for chunk in chunks)
    finally:
        await hosted.shutdown()
        await local.shutdown()
    assert not alive(pid)  # shutdown ends the host


async def test_tier3_ends_the_host_and_tier2_keeps_it() -> None:
    scheduler = hosted_scheduler([hosted_model("m")])
    try:
        await chat_text(scheduler, "m")
        pid = host_pid(scheduler, "m")
        await scheduler.move("m", MemoryTier.TIER2)
        assert host_pid(scheduler, "m") == pid and alive(pid)
        await scheduler.move("m", MemoryTier.TIER3)
        assert host_pid(scheduler, "m") is None
        await asyncio.sleep(0.1)
        assert not alive(pid)
        assert scheduler.status().models[0].current_tier == MemoryTier.TIER3
    finally:
        await scheduler.shutdown()


async def test_a_killed_host_fails_its_streams_and_the_next_request_reloads() -> None:
    scheduler = hosted_scheduler([hosted_model("m", slots=4, tokens=400, token_ms=5), hosted_model("other")])
    try:
        await chat_text(scheduler, "other")

        started: set[int] = set()

        async def stream(index: int) -> HypnosError | None:
            async with scheduler.lease("m", TEXT) as lease:
                try:
                    async for _ in lease.engine.chat(chat_input(max_tokens=400), lease.cancel):
                        started.add(index)
                except HypnosError as error:
                    return error
            return None

        streams = [asyncio.create_task(stream(index)) for index in range(4)]
        while len(started) < 4:  # noqa: ASYNC110 (all four are streaming)
            await asyncio.sleep(0.01)
        pid = host_pid(scheduler, "m")
        os.kill(pid, signal.SIGKILL)
        errors = await asyncio.wait_for(asyncio.gather(*streams), 10)
        assert all(error is not None and error.status == 500 for error in errors), errors
        assert "SIGKILL" in errors[0].message
        entry = next(m for m in scheduler.status().models if m.id == "m")
        assert entry.current_tier == MemoryTier.TIER3 and "SIGKILL" in (entry.unavailable_reason or "")
        assert scheduler.get("m").active_leases == 0
        assert await chat_text(scheduler, "other")  # the other model never noticed
        assert await chat_text(scheduler, "m")  # a new host
        assert host_pid(scheduler, "m") not in (None, pid)
        assert scheduler.get("m").engine.process_info().restarts == 1
    finally:
        await scheduler.shutdown()


async def test_a_host_that_exits_while_loading_fails_the_load() -> None:
    scheduler = hosted_scheduler([hosted_model("m", exit_on_load=True)])
    try:
        with pytest.raises(HypnosError) as caught:
            await chat_text(scheduler, "m")
        assert caught.value.status == 500 and "status 3" in caught.value.message
        state = scheduler.get("m")
        assert state.tier == MemoryTier.TIER3 and state.active_leases == 0 and state.booked.vram_bytes == 0
    finally:
        await scheduler.shutdown()


async def test_a_hung_host_is_killed_and_its_request_fails() -> None:
    scheduler = hosted_scheduler([hosted_model("m", hang_after_tokens=2, process={"hang_secs": 1.0})])
    try:
        with pytest.raises(HypnosError) as caught:
            await asyncio.wait_for(chat_text(scheduler, "m"), 15)
        assert caught.value.status == 500 and "no progress" in caught.value.message
        assert scheduler.get("m").tier == MemoryTier.TIER3
    finally:
        await scheduler.shutdown()


async def test_a_host_that_ignores_a_cancellation_is_killed_within_the_grace() -> None:
    scheduler = hosted_scheduler(
        [hosted_model("m", hang_after_tokens=2, process={"hang_secs": 600.0, "cancel_grace_secs": 1.0})]
    )
    try:
        async with scheduler.lease("m", TEXT) as lease:
            events = lease.engine.chat(chat_input(), lease.cancel)
            await events.__anext__()  # ChatAccepted
            await events.__anext__()  # the first token
            pid = host_pid(scheduler, "m")
            lease.cancel.cancel()  # the client left; the engine is stuck before its next check
            await events.aclose()
        for _ in range(100):
            if scheduler.status().models[0].unavailable_reason:
                break
            await asyncio.sleep(0.05)
        assert not alive(pid)
        assert "after its client left" in (scheduler.status().models[0].unavailable_reason or "")
        state = scheduler.get("m")
        assert state.tier == MemoryTier.TIER3 and state.active_leases == 0
    finally:
        await scheduler.shutdown()


async def test_restarts_stop_at_the_crash_limit_until_an_admin_enables_the_model() -> None:
    scheduler = hosted_scheduler([hosted_model("m", crash_after_tokens=1, process={"max_crashes": 2})])
    try:
        for _ in range(2):
            with pytest.raises(HypnosError) as caught:
                await chat_text(scheduler, "m")
            assert caught.value.status == 500
        with pytest.raises(HypnosError) as caught:
            await chat_text(scheduler, "m")
        assert caught.value.status == 503 and "enable" in caught.value.message
        await scheduler.set_enabled("m", True)
        with pytest.raises(HypnosError) as caught:  # starts again (and crashes again: the fault is in the model)
            await chat_text(scheduler, "m")
        assert caught.value.status == 500
    finally:
        await scheduler.shutdown()


async def test_large_payloads_travel_through_shared_memory_and_leave_nothing_behind() -> None:
    scheduler = hosted_scheduler([hosted_model("m", embedding_dim=4096)])
    try:
        texts = [f"text {i}" for i in range(64)]  # 64 x 4096 floats: a ~2 MB result
        async with scheduler.lease("m", Modality.EMBEDDINGS) as lease:
            result = await lease.engine.embed(texts, CancelToken())
            share = lease.engine.host.share
        assert len(result.vectors) == 64 and len(result.vectors[0]) == 4096
        assert share.is_dir() and not list(share.iterdir())
    finally:
        await scheduler.shutdown()
    assert not share.exists()


def niceness(pid: int) -> int:
    """A process's niceness from /proc (field 19 of stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return int(handle.read().rsplit(") ", 1)[1].split()[16])


async def test_a_host_takes_the_niceness_its_model_sets_and_the_kinds_default_otherwise() -> None:
    scheduler = hosted_scheduler([hosted_model("batch", process={"nice": 7}), hosted_model("plain")])
    try:
        for model_id in ("batch", "plain"):
            await chat_text(scheduler, model_id)
        batch, plain = host_pid(scheduler, "batch"), host_pid(scheduler, "plain")
        assert batch is not None and plain is not None
        assert niceness(batch) == min(19, niceness(os.getpid()) + 7)
        assert niceness(plain) == niceness(os.getpid())  # the fake kind declares no niceness
        # a niced host runs on what the others leave idle (SCHED_IDLE), its engine's threads too; a plain one as usual
        batch_threads = [int(tid) for tid in os.listdir(f"/proc/{batch}/task")]
        assert {os.sched_getscheduler(tid) for tid in batch_threads} == {os.SCHED_IDLE}
        assert os.sched_getscheduler(plain) == os.sched_getscheduler(0)
    finally:
        await scheduler.shutdown()
