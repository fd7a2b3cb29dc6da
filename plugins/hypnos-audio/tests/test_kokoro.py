"""Kokoro on the real int8 weights: tiers, voices, phrase streaming, cancellation, speed."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import pytest
from hypnos.config import Settings
from hypnos.engine import AudioChunk, CancelToken, SpeechInput
from hypnos.errors import HypnosError
from hypnos.types import LayerPlacementPlan, MemoryTier
from hypnos_audio.kokoro import MAX_FALLBACKS_LOGGED, KokoroEngine
from hypnos_audio.phonemes import group_phrases, split_phrases

from .conftest import make_engine

pytestmark = pytest.mark.model

FOUR_PHRASES = "The sun is bright. Birds are singing. We walk to the park. Then we go home."
CHUNKS = group_phrases(split_phrases(FOUR_PHRASES))


async def _collect(engine: KokoroEngine, speech: SpeechInput, cancel: CancelToken | None = None) -> list[AudioChunk]:
    return [chunk async for chunk in engine.speak(speech, cancel or CancelToken())]


async def test_tier_moves(starter_settings: Settings) -> None:
    engine = make_engine(starter_settings, "kokoro-82m")
    estimate = engine.estimate()
    size = engine.weights_file.stat().st_size
    # two sessions per thread count (each about twice the file) and the bytes they are made from, then the voices
    assert estimate.weight_bytes == 2 * 2 * size + size + engine.voices_file.stat().st_size
    assert estimate.workspace_bytes == 384 * 1024 * 1024
    assert not engine.ready and engine._model_bytes is None

    await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER2))
    assert not engine.ready
    assert engine._model_bytes is not None and engine.thread_sessions is None
    with pytest.raises(HypnosError, match="not loaded"):
        await _collect(engine, SpeechInput(text="Hi.", voice="jf_alpha"))

    phases = await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
    assert engine.ready and engine.thread_sessions is not None
    assert engine._model_bytes is not None  # kept to make the session of another core share
    assert phases.total_ms and phases.total_ms > 0
    assert engine.device == "cpu"
    assert await _collect(engine, SpeechInput(text="Hi.", voice="jf_alpha"))

    await engine.demote(MemoryTier.TIER2)
    assert not engine.ready and engine.thread_sessions is None and engine._model_bytes is not None
    await engine.demote(MemoryTier.TIER3)
    assert not engine.ready and engine._model_bytes is None and engine.voices() == []
    await engine.unload()
    # the scheduler may load again after an unload (it unloads after a failed load)
    await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER2))
    assert not engine.ready and engine._model_bytes is not None
    await engine.unload()


async def test_voice_fallback_logs_and_uses_the_first_voice(
    kokoro: KokoroEngine, caplog: pytest.LogCaptureFixture
) -> None:
    first = kokoro.voices()[0]
    assert first == "jf_alpha"
    with caplog.at_level(logging.WARNING, logger="hypnos_audio.kokoro"):
        assert kokoro.pick_voice("am_echo") == first
        assert kokoro.pick_voice("am_echo") == first
    warnings = [r for r in caplog.records if "am_echo" in r.getMessage()]
    assert len(warnings) == 1 and first in warnings[0].getMessage()
    assert kokoro.pick_voice("jm_kumo") == "jm_kumo"
    fallback = await _collect(kokoro, SpeechInput(text="Good morning.", voice="af_alloy"))
    direct = await _collect(kokoro, SpeechInput(text="Good morning.", voice=first))
    assert b"".join(c.pcm16 for c in fallback) == b"".join(c.pcm16 for c in direct)


async def test_first_chunk_arrives_before_the_last_phrase_is_synthesized(kokoro: KokoroEngine) -> None:
    before = kokoro.chunks_synthesized
    seen_at_chunk: list[int] = []
    chunks = []
    async for chunk in kokoro.speak(SpeechInput(text=FOUR_PHRASES, voice="jf_alpha"), CancelToken()):
        seen_at_chunk.append(kokoro.chunks_synthesized - before)
        chunks.append(chunk)
    assert len(CHUNKS) >= 3 and len(chunks) == len(CHUNKS)
    # when the first chunk reached us at most the first two were done (the next one runs ahead by one)
    assert seen_at_chunk[0] <= 2 < len(CHUNKS)
    assert kokoro.chunks_synthesized - before == len(CHUNKS)
    assert all(c.sample_rate == 24000 and len(c.pcm16) % 2 == 0 for c in chunks)
    # every chunk after the first starts with 180 ms of silence
    pause = 24000 * 180 // 1000
    for chunk in chunks[1:]:
        head = np.frombuffer(chunk.pcm16, dtype="<i2")[:pause]
        assert len(head) == pause and not head.any()
    assert np.frombuffer(chunks[0].pcm16, dtype="<i2")[:pause].any()


async def test_synthesis_never_blocks_the_event_loop(kokoro: KokoroEngine) -> None:
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    await _collect(kokoro, SpeechInput(text=FOUR_PHRASES, voice="jf_alpha"))
    took = time.perf_counter() - started
    done.set()
    await ticker
    assert took > 0.3 and len(gaps) > 10
    assert max(gaps) < max(0.25, took / 4), (max(gaps), took)


async def test_cancel_stops_between_phrases(kokoro: KokoroEngine) -> None:
    cancel = CancelToken()
    before = kokoro.chunks_synthesized
    chunks = []
    async for chunk in kokoro.speak(SpeechInput(text=FOUR_PHRASES, voice="jf_alpha"), cancel):
        chunks.append(chunk)
        cancel.cancel()
    assert len(chunks) == 1
    assert kokoro.chunks_synthesized - before <= 2


async def test_speed_changes_the_length(kokoro: KokoroEngine) -> None:
    text = "This sentence is spoken at two different speeds."
    normal = sum(len(c.pcm16) for c in await _collect(kokoro, SpeechInput(text=text, voice="jf_alpha")))
    fast = sum(len(c.pcm16) for c in await _collect(kokoro, SpeechInput(text=text, voice="jf_alpha", speed=2.0)))
    assert fast < normal * 0.7


async def test_nothing_to_speak_is_a_400(kokoro: KokoroEngine) -> None:
    with pytest.raises(HypnosError) as caught:
        await _collect(kokoro, SpeechInput(text="  \n ", voice="jf_alpha"))
    assert caught.value.status == 400


def test_missing_voice_names_neither_flood_the_log_nor_grow_the_engine(
    kokoro: KokoroEngine, caplog: pytest.LogCaptureFixture
) -> None:
    first = kokoro.voices()[0]
    with caplog.at_level(logging.DEBUG, logger="hypnos_audio.kokoro"):
        for index in range(3 * MAX_FALLBACKS_LOGGED):
            assert kokoro.pick_voice(f"xx_{index}_" + "v" * 100_000) == first
    messages = [r.getMessage() for r in caplog.records if r.name == "hypnos_audio.kokoro"]
    assert len(messages) == 3 * MAX_FALLBACKS_LOGGED
    assert max(len(message) for message in messages) < 1000
    assert sum(r.levelno == logging.WARNING for r in caplog.records) <= MAX_FALLBACKS_LOGGED
    assert len(kokoro._fallbacks_logged) <= MAX_FALLBACKS_LOGGED
