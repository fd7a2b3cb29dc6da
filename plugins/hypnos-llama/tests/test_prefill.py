"""Prefill that yields: the ChatAccepted event before a prompt's prefill, and the pace of prompt chunks (cut short
enough that a cancellation is seen soon, and beside streaming answers only within their share of the time)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import msgspec
from hypnos.engine import CancelToken, ChatAccepted, ChatFinished
from hypnos_llama.prefill_pace import EFFICIENT_CHUNK, FIRST_CHUNK, MIN_CHUNK, PrefillPace
from hypnos_llama.slots import Slot
from hypnos_llama.step_slots import prefill_order
from hypnos_llama.testing import chat_request, make_engine, tier1

PROMPT = " ".join(["word"] * 300)


async def test_the_accepted_event_comes_while_the_prompt_is_still_prefilling(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, llama={"n_batch": 32})
    await engine.load(tier1())
    gate = threading.Event()
    try:
        batch = engine._batch
        decode = batch.context.decode

        def held() -> int:  # the worker waits in the prompt's first llama_decode until the test lets it go
            gate.wait(120)
            return decode()

        batch.context.decode = held
        request = msgspec.structs.replace(chat_request(PROMPT), max_tokens=3)
        stream = engine.chat(request, CancelToken()).__aiter__()
        first = await asyncio.wait_for(anext(stream), 60)
        slot = next(s for s in batch.slots if s.job is not None)
        assert isinstance(first, ChatAccepted)
        assert first.prompt_tokens == len(slot.job.prompt) > 32 and first.cached_tokens == 0
        assert slot.pending and slot.first_token is None  # nothing of the prompt decoded yet, no token made
        gate.set()
        rest = [event async for event in stream]
        final = rest[-1]
        assert not any(isinstance(event, ChatAccepted) for event in rest)
        assert isinstance(final, ChatFinished) and final.completion_tokens == 3
        assert (final.prompt_tokens, final.cached_tokens) == (first.prompt_tokens, first.cached_tokens)

        again = engine.chat(request, CancelToken()).__aiter__()  # the same prompt: its prefix is cached
        accepted = await asyncio.wait_for(anext(again), 60)
        final = [event async for event in again][-1]
        assert isinstance(accepted, ChatAccepted) and accepted.cached_tokens == final.cached_tokens > 0
    finally:
        gate.set()
        await engine.unload()


async def test_a_client_gone_mid_prefill_stops_the_chunk_under_way(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, llama={"n_batch": 32})
    await engine.load(tier1())
    try:
        batch = engine._batch
        decode = batch.context.decode
        cancel = CancelToken()
        chunks: list[int] = []

        def counted() -> int:
            chunks.append(batch.context.n_tokens)
            if len(chunks) == 2:
                cancel.cancel()  # the client leaves during the prompt's second chunk
            return decode()

        batch.context.decode = counted
        request = msgspec.structs.replace(chat_request(PROMPT), max_tokens=3)
        events = [event async for event in engine.chat(request, cancel)]
        final = events[-1]
        assert isinstance(final, ChatFinished) and final.finish_reason == "cancelled"
        assert final.completion_tokens == 0 and chunks == [32, 32]
        assert all(slot.job is None for slot in batch.slots)
        assert batch.abort.aborted == 1
        batch.context.decode = decode
        again = engine.chat(request, CancelToken()).__aiter__()
        accepted = await asyncio.wait_for(anext(again), 60)
        # the first chunk stays as a cached prefix; the one under way when the client left was aborted
        assert isinstance(accepted, ChatAccepted) and accepted.cached_tokens == 32
        assert [event async for event in again][-1].completion_tokens == 3
    finally:
        await engine.unload()


async def test_a_prompt_nearly_all_cached_prefills_before_a_long_one_admitted_earlier(tiny_gguf: Path) -> None:
    """An agent's next turn (its conversation cached, a few new tokens) came while another client's long prompt
    prefilled: it waited out that whole prefill (Continue's 1-token turn 84 s, Cline's 149 s, beside Kilo Code's
    12k-token prompt). Its tokens now take the front of the next step's chunk."""
    engine = make_engine(tiny_gguf, llama={"n_batch": 32})
    await engine.load(tier1())
    gate = threading.Event()
    try:
        batch = engine._batch
        decode = batch.context.decode
        answered_while_long_prefilled: list[bool] = []

        def traced() -> int:
            gate.wait(120)  # the long prompt's first chunk waits until the short request is in
            active = sorted((s for s in batch.slots if s.job is not None), key=lambda s: len(s.job.prompt))
            if len(active) == 2 and active[0].first_token is not None:
                answered_while_long_prefilled.append(bool(active[1].pending))
            return decode()

        batch.context.decode = traced
        long = engine.chat(msgspec.structs.replace(chat_request(PROMPT), max_tokens=2), CancelToken()).__aiter__()
        assert isinstance(await asyncio.wait_for(anext(long), 60), ChatAccepted)
        short = engine.chat(msgspec.structs.replace(chat_request("hi"), max_tokens=4), CancelToken()).__aiter__()
        pending = asyncio.ensure_future(anext(short))
        await asyncio.sleep(0.2)  # the short request waits in the inbox while the long prompt's first step is held
        gate.set()
        assert isinstance(await asyncio.wait_for(pending, 60), ChatAccepted)
        finals = [[event async for event in stream][-1] for stream in (short, long)]
        assert all(isinstance(final, ChatFinished) and final.finish_reason == "length" for final in finals)
        assert answered_while_long_prefilled and answered_while_long_prefilled[0]
    finally:
        gate.set()
        await engine.unload()


def test_the_prompt_with_the_fewest_tokens_left_prefills_first_and_a_passed_over_one_gains() -> None:
    long, short = Slot(seq_id=0, pending=[1] * 1000, admitted=1.0), Slot(seq_id=1, pending=[1] * 3, admitted=2.0)
    assert prefill_order([long, short]) == [short, long]
    newcomer = Slot(seq_id=2, pending=[1] * 400, admitted=3.0)
    assert prefill_order([long, newcomer]) == [newcomer, long]
    long.passed_over = 700  # others' prefill delays a long prompt by at most about its own length
    assert prefill_order([long, newcomer]) == [long, newcomer]


def test_alone_a_chunk_is_cut_to_the_step_time() -> None:
    pace = PrefillPace(n_batch=512, chunk_beside=256, share=0.25, step_secs=1.0)
    assert pace.budget(streaming=False) == FIRST_CHUNK  # no rate measured yet
    pace.record(0.125, 128, streaming=False)  # 1,024 prompt tokens a second
    assert pace.budget(streaming=False) == 512
    pace.record(2.0, 512, streaming=False)  # 256 prompt tokens a second
    assert pace.budget(streaming=False) == 256
    pace.record(16.0, 256, streaming=False)  # deep in a long context: 16 a second
    assert pace.budget(streaming=False) == EFFICIENT_CHUNK  # shorter chunks would prefill at half the rate
    assert pace.budget(streaming=False, background=True) == MIN_CHUNK  # a batch line's prompt: short steps


def test_beside_streams_prefill_takes_its_share_of_the_time() -> None:
    pace = PrefillPace(n_batch=512, chunk_beside=256, share=0.25, step_secs=1.0)
    pace.record(0.0625, 0, streaming=True)  # a decode-only step of the streams: 62.5 ms
    assert pace.budget(streaming=True) == FIRST_CHUNK
    pace.record(0.5625, 256, streaming=True)  # a chunk beside them: 0.5 s more than their step
    waited = 0
    while pace.budget(streaming=True) == 0:
        pace.record(0.0625, 0, streaming=True)
        waited += 1
    assert waited == 32  # 0.5 s of prefill / 0.25 = 2 s of their decode-only steps before the next chunk
    assert pace.budget(streaming=True) == 256  # 0.5 s a chunk measured: within the step time
