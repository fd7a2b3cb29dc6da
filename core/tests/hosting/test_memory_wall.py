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
from hypnos.hosting.proxy import HostedEngine

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


def test_a_host_that_moves_prompt_states_books_one_whole_context_kv_more() -> None:
    estimate = MemoryEstimate(weight_bytes=100 * MiB, kv_bytes_per_token=1024, max_context_len=8192,
                              default_context_len=4096)  # fmt: skip
    process = ProcessConfig()
    plain = memory_limit(process, estimate, 50 * MiB)
    moving = memory_limit(process, estimate, 50 * MiB, moves_states=True)
    assert plain is not None and moving is not None
    assert moving - plain == 8 * MiB  # the whole context's KV (8192 tokens of 1 KiB), where a state lies on its way
    assert memory_limit(ProcessConfig(memory_limit_bytes=LIMIT), estimate, 0, moves_states=True) == LIMIT


async def test_the_server_books_a_state_in_flight_only_for_a_host_with_the_prompt_cache_on() -> None:
    context = 8192
    plain = hosted_model("plain", kv_bytes_per_token=64 * 1024, max_context_len=context)
    plain["prompt_cache"] = {"enabled": False}
    scheduler = hosted_scheduler([hosted_model("cached", kv_bytes_per_token=64 * 1024, max_context_len=context), plain])
    try:
        walls = {}
        for model_id in ("cached", "plain"):
            await asyncio.wait_for(chat_text(scheduler, model_id), 30)
            engine = scheduler.get(model_id).engine
            assert isinstance(engine, HostedEngine) and engine.host is not None and engine.host.memory_limit
            walls[model_id] = engine.host.memory_limit - engine.base_rss
        assert walls["cached"] - walls["plain"] == 64 * 1024 * context
    finally:
        await scheduler.shutdown()
