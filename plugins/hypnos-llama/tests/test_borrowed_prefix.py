"""A prompt whose start another slot holds (another conversation's system prompt and tools, or the echo guard's
answer again without the tool list in a free slot) shares those cells in the unified pool instead of prefilling them
again, and answers as it does prefilled from scratch."""

from __future__ import annotations

import asyncio

from hypnos_llama.testing import chat_request, collect

SHARED = "You are a careful assistant who answers in one short line. " * 16


async def test_a_prompt_borrows_the_prefix_another_slot_holds_and_answers_the_same(engine) -> None:
    first = chat_request(SHARED + "What is the first question?", temperature=0)
    second = chat_request(SHARED + "And a second, different one?", temperature=0)
    alone, alone_final, _ = await collect(engine, second, max_tokens=24)
    assert alone_final.cached_tokens == 0
    for slot in engine._batch.slots:  # nothing cached: the second prompt can only borrow from the first's slot
        engine._batch.context.seq_trim(slot.seq_id, 0)
        slot.cached = []
    running = asyncio.ensure_future(collect(engine, first, max_tokens=1500))
    for _ in range(500):
        if any(slot.job is not None and slot.completion for slot in engine._batch.slots):
            break
        await asyncio.sleep(0.01)
    text, final, _ = await collect(engine, second, max_tokens=24)
    await running
    holders = [slot for slot in engine._batch.slots if slot.cached]
    assert len(holders) == 2  # the second prompt took its own slot
    assert final.cached_tokens >= len(SHARED) // 2  # the shared start (about a token a byte) was not prefilled
    assert final.timing.cached_tokens == final.cached_tokens
    assert text == alone
