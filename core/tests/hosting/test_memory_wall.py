"""The memory wall around an engine host: a request that takes its host past the limit fails with 400
host_memory_limit naming it, costs at most that host, and never counts toward the model's quarantine."""

from __future__ import annotations

import asyncio

import pytest
from host_kit import alive, chat_text, host_pid, hosted_model, hosted_scheduler
from hypnos.config import ProcessConfig
from hypnos.engine import MemoryEstimate
from hypnos.errors import HypnosError
from hypnos.hosting.memory_wall import DATA_SLACK, memory_limit

MiB = 1024 * 1024
LIMIT = 256 * MiB


async def test_a_request_past_the_resident_wall_gets_400_and_its_host_kill_is_not_a_crash() -> None:
    # the chat touches 384 MiB and holds it while it streams: the watch sees the resident set past 256 MiB
    model = hosted_model(
        "m",
        grab_bytes=384 * MiB,
        tokens=40,
        token_ms=50,
        process={"memory_limit_bytes": LIMIT, "max_crashes": 1, "hang_secs": 60},
    )
    scheduler = hosted_scheduler([model])
    try:
        for _ in range(2):  # with max_crashes = 1, a crash counted would quarantine the model after the first
            with pytest.raises(HypnosError) as caught:
                await asyncio.wait_for(chat_text(scheduler, "m"), 30)
            assert caught.value.status == 400 and caught.value.code == "host_memory_limit"
            assert str(LIMIT) in caught.value.message and "memory_limit_bytes" in caught.value.message
        state = next(m for m in scheduler.status().models if m.id == "m")
        assert "quarantined" not in (state.unavailable_reason or "")
    finally:
        await scheduler.shutdown()


async def test_an_allocation_past_the_data_wall_fails_the_request_and_the_host_lives_on() -> None:
    grab = LIMIT + DATA_SLACK + 256 * MiB  # past RLIMIT_DATA: refused at once, nothing touched
    scheduler = hosted_scheduler([hosted_model("m", grab_bytes=grab, process={"memory_limit_bytes": LIMIT})])
    try:
        with pytest.raises(HypnosError) as caught:
            await asyncio.wait_for(chat_text(scheduler, "m"), 30)
        assert caught.value.status == 400 and caught.value.code == "host_memory_limit"
        pid = host_pid(scheduler, "m")
        assert pid is not None and alive(pid)
    finally:
        await scheduler.shutdown()


def test_the_default_wall_is_the_booking_plus_headroom_and_zero_turns_it_off() -> None:
    estimate = MemoryEstimate(weight_bytes=100 * MiB, workspace_bytes=20 * MiB, kv_bytes_per_token=1024,
                              default_context_len=4096)  # fmt: skip
    process = ProcessConfig()
    assert memory_limit(process, estimate, 50 * MiB) == 50 * MiB + 124 * MiB + process.memory_headroom_bytes
    assert memory_limit(ProcessConfig(memory_limit_bytes=LIMIT), estimate, 50 * MiB) == LIMIT
    assert memory_limit(ProcessConfig(memory_limit_bytes=0), estimate, 50 * MiB) is None
