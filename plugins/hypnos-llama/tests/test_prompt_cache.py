"""The prompt cache on the tiny llama: a conversation whose slot went to another prompt, whose model left tier 1, or
whose server restarted comes back from a saved state (RAM, then disk) with the same tokens at temperature 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos.config import PromptCacheConfig
from hypnos.scheduler.prompt_cache import PromptCacheStore
from hypnos.types import MemoryTier
from hypnos_llama.testing import chat_request, collect, make_engine, tier1

SETTINGS = PromptCacheConfig(min_tokens=256)
HISTORY = "the first conversation, long enough to be worth saving: " + "a tower and a river. " * 30
OTHER = "another conversation entirely, which takes the only slot: " + "red green blue. " * 30


def cached_engine(gguf: Path, store: PromptCacheStore | None) -> Any:
    """A one-slot engine whose prompt cache is `store` (None: no prompt cache)."""
    engine = make_engine(gguf, slots=1, context_len=4096)
    engine.model.prompt_cache = SETTINGS
    engine.context.prompt_cache = store
    return engine


async def three_turns(engine: Any) -> tuple[list[str], Any]:
    """The first conversation, another one in its slot, then the first one's next turn: the answers, the last finish."""
    await engine.load(tier1(4096))
    first, _, _ = await collect(engine, chat_request(HISTORY, temperature=0), max_tokens=12)
    other, _, _ = await collect(engine, chat_request(OTHER, temperature=0), max_tokens=12)
    turn = chat_request(HISTORY, first, "and the river?", temperature=0)
    again, finished, _ = await collect(engine, turn, max_tokens=12)
    return [first, other, again], finished


async def after_a_restart(
    gguf: Path, tmp_path: Path, answer: str, context_len: int, **fields: Any
) -> tuple[str, Any, PromptCacheStore]:
    """The first conversation's next turn on a cold engine over a new store of the same disk tier: the answer, its
    finish and the store."""
    restarted = PromptCacheStore(tmp_path / "cache", lambda model_id: SETTINGS)
    cold = cached_engine(gguf, restarted)
    try:
        await cold.load(tier1(context_len))
        turn = chat_request(HISTORY, answer, "and the river?", temperature=0, **fields)
        again, after, _ = await collect(cold, turn, max_tokens=12)
    finally:
        await cold.unload()
    return again, after, restarted


async def test_answers_are_the_same_tokens_with_and_without_the_prompt_cache(tiny_gguf: Path, tmp_path: Path) -> None:
    plain = cached_engine(tiny_gguf, None)
    try:
        without, plain_finish = await three_turns(plain)
    finally:
        await plain.unload()
    assert plain_finish.cached_tokens < 32  # the other conversation took the slot: all but the template's head again

    store = PromptCacheStore(tmp_path / "cache", lambda model_id: SETTINGS)
    engine = cached_engine(tiny_gguf, store)
    try:
        answers, finished = await three_turns(engine)
        assert answers == without
        assert finished.cached_tokens >= 256 and finished.timing.cached_tokens == finished.cached_tokens
        assert store.hits["ram"] == 1

        # the model leaves tier 1 (its slot is saved) and comes back: still the same answer
        await engine.demote(MemoryTier.TIER2)
        await engine.load(tier1(4096))
        turn = chat_request(HISTORY, answers[0], "and the river?", temperature=0)
        again, back, _ = await collect(engine, turn, max_tokens=12)
        assert again == answers[2] and back.cached_tokens >= finished.cached_tokens
    finally:
        await engine.unload()
    store.flush()

    # a restart: a new store indexes the disk tier, a cold engine restores from it
    again, after, restarted = await after_a_restart(tiny_gguf, tmp_path, answers[0], 4096)
    assert again == answers[2] and after.cached_tokens >= finished.cached_tokens
    assert restarted.hits["disk"] == 1


async def test_a_key_never_restores_another_keys_prompt(tiny_gguf: Path, tmp_path: Path) -> None:
    store = PromptCacheStore(tmp_path / "cache", lambda model_id: SETTINGS)
    engine = cached_engine(tiny_gguf, store)
    try:
        await engine.load(tier1(4096))
        await collect(engine, chat_request(HISTORY, temperature=0, cache_scope="alice"), max_tokens=4)
        _, bob, _ = await collect(engine, chat_request(HISTORY, temperature=0, cache_scope="bob"), max_tokens=4)
        assert bob.cached_tokens == 0  # neither the slot nor a saved state of alice's
        _, alice, _ = await collect(engine, chat_request(HISTORY, temperature=0, cache_scope="alice"), max_tokens=4)
        assert alice.cached_tokens > 0  # bob's request took the slot: alice's state comes back from the store
    finally:
        await engine.unload()


async def test_a_state_saved_in_a_grown_context_is_found_after_a_restart(tiny_gguf: Path, tmp_path: Path) -> None:
    # an agent's request grew the context before its conversation was saved; the restarted server starts small
    store = PromptCacheStore(tmp_path / "cache", lambda model_id: SETTINGS)
    engine = cached_engine(tiny_gguf, store)
    try:
        await engine.load(tier1(1024))
        first, _, _ = await collect(engine, chat_request(HISTORY, temperature=0, num_ctx=3000), max_tokens=12)
        assert engine._batch.context.shape.n_ctx >= 3000
    finally:
        await engine.unload()
    store.flush()

    _, after, restarted = await after_a_restart(tiny_gguf, tmp_path, first, 1024, num_ctx=3000)
    assert after.cached_tokens >= 256 and restarted.hits["disk"] == 1


async def test_a_request_holds_no_saved_state_once_it_starts(tiny_gguf: Path, tmp_path: Path) -> None:
    """A found state is restored and let go: a request that runs on holds no copy of it (its host's memory)."""
    store = PromptCacheStore(tmp_path / "cache", lambda model_id: SETTINGS)
    engine = cached_engine(tiny_gguf, store)
    started: list[Any] = []
    try:
        answers, finished = await three_turns(engine)
        assert store.hits["ram"] == 1 and finished.cached_tokens >= 256
        states = engine._batch.states
        prepare = states.prepare

        def watched(context: Any, slot: Any, job: Any) -> None:
            prepare(context, slot, job)
            started.append(job)

        states.prepare = watched
        await collect(engine, chat_request(OTHER, temperature=0), max_tokens=4)
        hits = store.hits["ram"]
        turn = chat_request(HISTORY, answers[0], "and the river?", temperature=0)
        _, restored, _ = await collect(engine, turn, max_tokens=4)
        assert store.hits["ram"] == hits + 1 and restored.cached_tokens >= 256  # the state was found and restored
        assert started and all(job.restore is None for job in started)
    finally:
        await engine.unload()
