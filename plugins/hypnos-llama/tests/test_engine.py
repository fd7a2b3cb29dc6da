"""The engine on a tiny random-weight llama: tiers, streaming, slots, batching, prefix reuse, cancellation."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import msgspec
import pytest
from hypnos.engine import CancelToken, ChatAccepted, ChatFinished, ContentDelta, EngineUnavailable
from hypnos.errors import HypnosError
from hypnos.types import MemoryTier
from hypnos_llama.testing import chat_request, collect, make_engine, tier1, tier2


def _batch_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("llama-batch-")]


async def test_tiers_load_demote_unload(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, model_id="tiers")
    phases = await engine.load(tier2())
    assert not engine.ready and phases.load_mode == "mmap"
    assert engine._warm.held and _batch_threads() == []
    phases = await engine.load(tier1())
    assert engine.ready
    assert phases.weights_ms is not None and phases.context_ms is not None and phases.total_ms is not None
    assert _batch_threads() == ["llama-batch-tiers"]
    await engine.demote(MemoryTier.TIER2)
    assert not engine.ready and engine._warm.held and _batch_threads() == []
    with pytest.raises(EngineUnavailable):
        await collect(engine, chat_request("hi"))
    await engine.unload()
    assert not engine.ready and not engine._warm.held


async def test_load_from_tier3_straight_to_tier1_with_read_mode(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, llama={"use_mmap": False})
    phases = await engine.load(tier1())
    try:
        assert phases.load_mode == "read"
        _, final, _ = await collect(engine, chat_request("hello", temperature=0), max_tokens=4)
        assert final.completion_tokens == 4
    finally:
        await engine.unload()


async def test_missing_weights_are_unavailable(tmp_path: Path) -> None:
    engine = make_engine(tmp_path / "absent.gguf")
    with pytest.raises(EngineUnavailable, match=r"missing.*hypnos pull <catalog id>.*fix `weights_path`"):
        engine.estimate()


async def test_stream_of_events_ends_with_usage_and_timings(engine) -> None:
    text, final, events = await collect(
        engine, chat_request("What is the capital of France?", temperature=0), max_tokens=12
    )
    assert isinstance(events[0], ChatAccepted) and events[0].prompt_tokens == final.prompt_tokens
    assert all(isinstance(e, ContentDelta) for e in events[1:-1])
    assert isinstance(final, ChatFinished) and final.finish_reason == "length"
    assert final.completion_tokens == 12 and final.prompt_tokens > 5
    timing = final.timing
    for name in ("queue_ms", "prefill_ms", "decode_ms", "ttft_ms", "prefill_tokens_per_s", "decode_tokens_per_s"):
        assert getattr(timing, name) is not None and getattr(timing, name) >= 0, name
    assert timing.concurrent_slots == 1
    assert "<|im_start|>" not in text and "<|im_end|>" not in text and "<s>" not in text


async def test_same_seed_same_answer_and_greedy_is_stable(engine) -> None:
    first, _, _ = await collect(engine, chat_request("tell me", temperature=0.9, seed=123), max_tokens=24)
    again, _, _ = await collect(engine, chat_request("tell me", temperature=0.9, seed=123), max_tokens=24)
    other, _, _ = await collect(engine, chat_request("tell me", temperature=0.9, seed=124), max_tokens=24)
    assert first == again
    assert first != other


async def test_cancellation_frees_the_slot(engine) -> None:
    cancel = CancelToken()
    stream = engine.chat(chat_request("go on", max_tokens=4000), cancel)
    seen = 0
    async for event in stream:
        if isinstance(event, ContentDelta):
            seen += 1
            if seen == 3:
                cancel.cancel()
        if isinstance(event, ChatFinished):
            assert event.finish_reason == "cancelled"
            assert event.completion_tokens < 4000
    assert all(slot.job is None for slot in engine._batch.slots)
    _, final, _ = await collect(engine, chat_request("next"), max_tokens=3)
    assert final.completion_tokens == 3


async def test_closing_the_stream_frees_the_slot(engine) -> None:
    stream = engine.chat(chat_request("go on", max_tokens=4000), CancelToken())
    async for event in stream:
        if isinstance(event, ContentDelta):
            break
    await stream.aclose()
    for _ in range(200):
        if all(slot.job is None for slot in engine._batch.slots):
            break
        await asyncio.sleep(0.01)
    assert all(slot.job is None for slot in engine._batch.slots)


async def test_concurrent_requests_share_decode_steps_and_match_alone(engine) -> None:
    prompts = ["first question here", "a second and different one", "third"]
    # long enough answers that all three overlap however late the third arrives
    alone = [(await collect(engine, chat_request(p, temperature=0), max_tokens=96))[0] for p in prompts]
    for slot in engine._batch.slots:  # no prefix reuse: every request prefills from scratch
        engine._batch.context.seq_trim(slot.seq_id, 0)
        slot.cached = []
    together = await asyncio.gather(*(collect(engine, chat_request(p, temperature=0), max_tokens=96) for p in prompts))
    assert [t[0] for t in together] == alone
    assert max(t[1].timing.concurrent_slots for t in together) == 3
    assert engine._batch.max_concurrent == 3


async def test_more_requests_than_slots_queue(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, slots=2, context_len=4096)
    await engine.load(tier1(4096))
    try:
        results = await asyncio.gather(*(collect(engine, chat_request(f"q{i}"), max_tokens=8) for i in range(5)))
        assert all(final.completion_tokens == 8 for _, final, _ in results)
        assert max(final.timing.concurrent_slots for _, final, _ in results) == 2
    finally:
        await engine.unload()


async def test_append_only_second_turn_reuses_the_prefix(engine) -> None:
    first = chat_request("Hello there, this is turn one.", temperature=0)
    answer, final1, _ = await collect(engine, first, max_tokens=8)
    assert final1.cached_tokens == 0
    second = chat_request("Hello there, this is turn one.", answer, "And turn two.", temperature=0)
    _, final2, _ = await collect(engine, second, max_tokens=8)
    assert final2.cached_tokens >= final1.prompt_tokens
    assert final2.timing.cached_tokens == final2.cached_tokens


async def test_a_new_conversation_takes_a_free_slot_not_another_conversations_cells(tiny_gguf: Path) -> None:
    # an agent's side request (another system prompt: only the template's head in common) leaves its main
    # conversation's slot alone while another slot is free
    engine = make_engine(tiny_gguf, slots=2, context_len=2048)
    await engine.load(tier1(4096))
    try:
        main = "Hello there, this is turn one of a long conversation."
        answer, first, _ = await collect(engine, chat_request(main, temperature=0), max_tokens=8)
        side = "Write a title for this conversation: " + "a tower and a river. " * 20
        await collect(engine, chat_request(side, temperature=0), max_tokens=8)
        _, second, _ = await collect(engine, chat_request(main, answer, "And turn two.", temperature=0), max_tokens=8)
        assert second.cached_tokens >= first.prompt_tokens
    finally:
        await engine.unload()


async def test_tier2_to_tier1_and_back_mid_conversation(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, model_id="midconv")
    await engine.load(tier2())
    await engine.load(tier1())
    turn1 = chat_request("Remember the word apple.", temperature=0)
    answer, _, _ = await collect(engine, turn1, max_tokens=6)
    await engine.demote(MemoryTier.TIER2)
    phases = await engine.load(tier1())
    assert phases.load_mode == "mmap" and phases.total_ms is not None
    turn2 = chat_request("Remember the word apple.", answer, "Which word?", temperature=0)
    after, final, _ = await collect(engine, turn2, max_tokens=6)
    await engine.demote(MemoryTier.TIER2)
    await engine.load(tier1())
    again, _, _ = await collect(engine, turn2, max_tokens=6)
    assert after == again and final.completion_tokens == 6
    await engine.unload()


async def test_context_is_rebuilt_when_a_request_needs_more(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, slots=2, context_len=1024)
    resized: list[tuple[str, int]] = []
    engine.context.context_resized = lambda model_id, cells: resized.append((model_id, cells))
    await engine.load(tier1(1024))
    try:
        assert engine._batch.context.shape.n_ctx == 1024
        _, final, _ = await collect(engine, chat_request("long one", num_ctx=3000), max_tokens=4)
        assert engine._batch.context.shape.n_ctx >= 3000
        assert final.timing.context_ms is not None
        assert resized == [(engine.model.id, engine._batch.context.shape.n_ctx)]  # the scheduler is told
    finally:
        await engine.unload()


async def test_cached_conversations_survive_the_context_growing(tiny_gguf: Path) -> None:
    # an agent's next turn asks for more room (a larger max_tokens): the context grows, and both slots' conversations
    # stay cached, each with its own cells
    engine = make_engine(tiny_gguf, slots=2, context_len=512)
    reference = make_engine(tiny_gguf, slots=2, context_len=4096, model_id="reference")
    await engine.load(tier1(1024))
    await reference.load(tier1(8192))
    try:
        openings = (
            "Hello there, this is turn one of a long conversation.",
            "Another chat entirely, in the other slot.",
        )
        firsts = [await collect(engine, chat_request(text, temperature=0), max_tokens=8) for text in openings]
        nexts = [
            chat_request(openings[0], firsts[0][0], "And turn two.", temperature=0),
            chat_request(openings[1], firsts[1][0], "And yours?", temperature=0),
        ]
        grown = msgspec.structs.replace(nexts[0], context_len=3000)
        answers = [await collect(engine, request, max_tokens=8) for request in (grown, nexts[1])]
        assert engine._batch.context.shape.n_ctx >= 3000 and answers[0][1].timing.context_ms is not None  # it grew
        for (_, first, _), (_, final, _) in zip(firsts, answers, strict=True):
            assert final.cached_tokens >= first.prompt_tokens
        for text in openings:
            await collect(reference, chat_request(text, temperature=0), max_tokens=8)
        expected = [(await collect(reference, request, max_tokens=8))[0] for request in nexts]
        assert [text for text, _, _ in answers] == expected  # the carried cells are each conversation's own
    finally:
        await engine.unload()
        await reference.unload()


async def test_a_long_prompt_does_not_stall_a_running_stream(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, llama={"prefill_chunk": 16, "n_batch": 64})
    await engine.load(tier1())
    try:
        cancel = CancelToken()
        tokens_during_prefill = 0

        async def stream() -> None:
            nonlocal tokens_during_prefill
            async for event in engine.chat(chat_request("short", max_tokens=4000), cancel):
                if isinstance(event, ContentDelta) and long_started.is_set() and not long_done.is_set():
                    tokens_during_prefill += 1

        long_started, long_done = asyncio.Event(), asyncio.Event()
        running = asyncio.create_task(stream())
        for _ in range(5000):  # until the stream is decoding
            if engine._batch.steps >= 3:
                break
            await asyncio.sleep(0.001)
        long_started.set()
        _, final, _ = await collect(engine, chat_request(" ".join(["word"] * 300)), max_tokens=1)
        long_done.set()
        cancel.cancel()
        await running
        chunks = final.prompt_tokens // 16
        assert 0 < engine._batch.max_prefill_beside_streams <= 16
        assert tokens_during_prefill >= chunks // 2  # the stream kept going while the prompt was prefilled
    finally:
        await engine.unload()


async def test_prompt_longer_than_the_model_is_refused(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf)
    await engine.load(tier1())
    try:
        with pytest.raises(HypnosError) as caught:
            await collect(engine, chat_request("x" * 5000), max_tokens=4)
        assert caught.value.status == 400
    finally:
        await engine.unload()


async def test_separate_kv_streams_per_slot(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, slots=3, context_len=2048, llama={"kv_unified": False})
    await engine.load(tier1(3 * 2048))
    try:
        assert engine._batch.sequence_capacity == 2048
        prompts = ["one", "two two", "three three three"]
        alone = [(await collect(engine, chat_request(p, temperature=0), max_tokens=12))[0] for p in prompts]
        together = await asyncio.gather(
            *(collect(engine, chat_request(p, temperature=0), max_tokens=12) for p in prompts)
        )
        assert [t[0] for t in together] == alone
        _, final, _ = await collect(engine, chat_request("bigger", num_ctx=3000), max_tokens=4)
        assert engine._batch.sequence_capacity >= 3000 and final.timing.context_ms is not None
    finally:
        await engine.unload()


async def test_the_event_loop_stays_free_while_the_model_works(engine) -> None:
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = asyncio.get_running_loop().time()
        while not done.is_set():
            await asyncio.sleep(0.002)
            now = asyncio.get_running_loop().time()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await collect(engine, chat_request(" ".join(["word"] * 200)), max_tokens=300)
    done.set()
    await task
    assert len(gaps) > 5 and max(gaps) < 0.5


async def test_many_requests_with_cancellations_leave_every_slot_free(engine) -> None:
    async def one(index: int) -> str:
        cancel = CancelToken()
        # the cancelled ones are asked for many tokens so that a consumer lagging behind the batch loop on a loaded
        # machine still sees its cancel land long before the answer could end by length
        stream = engine.chat(chat_request(f"request {index}", max_tokens=400 if index % 3 == 0 else 30), cancel)
        seen = 0
        async for event in stream:
            if isinstance(event, ContentDelta):
                seen += 1
                if index % 3 == 0 and seen == 2:
                    cancel.cancel()
                if index % 3 == 1 and seen == 4:
                    await stream.aclose()
                    return "closed"
            if isinstance(event, ChatFinished):
                return event.finish_reason
        return "ended"

    reasons = await asyncio.gather(*(one(i) for i in range(12)))
    assert reasons.count("cancelled") == 4 and reasons.count("closed") == 4 and reasons.count("length") == 4
    for _ in range(200):
        if all(slot.job is None for slot in engine._batch.slots) and not engine._batch._waiting:
            break
        await asyncio.sleep(0.01)
    assert all(slot.job is None for slot in engine._batch.slots)


async def test_an_unload_mid_stream_fails_the_stream(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf)
    await engine.load(tier1())
    stream = engine.chat(chat_request("go on", max_tokens=100000), CancelToken())
    with pytest.raises(HypnosError) as caught:
        async for event in stream:
            if isinstance(event, ContentDelta):
                await engine.unload()
    assert caught.value.status == 500


async def test_a_broken_worker_fails_requests_instead_of_hanging(engine, monkeypatch) -> None:
    def broken_step() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(engine._batch, "_step", broken_step)
    with pytest.raises(HypnosError, match="the llama engine failed") as caught:  # the cause goes to the log only
        await collect(engine, chat_request("one"), max_tokens=4)
    assert caught.value.status == 500 and "boom" not in str(caught.value)
    with pytest.raises(HypnosError):
        await asyncio.wait_for(collect(engine, chat_request("two"), max_tokens=4), timeout=10)


async def test_idle_slots_are_emptied_after_the_timeout(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, llama={"kv_idle_timeout_secs": 0.2})
    await engine.load(tier1())
    try:
        await collect(engine, chat_request("keep me"), max_tokens=4)
        assert any(slot.cached for slot in engine._batch.slots)
        for _ in range(100):
            if not any(slot.cached for slot in engine._batch.slots):
                break
            await asyncio.sleep(0.05)
        assert not any(slot.cached for slot in engine._batch.slots)
    finally:
        await engine.unload()
