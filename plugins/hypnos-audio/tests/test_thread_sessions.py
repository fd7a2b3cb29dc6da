"""The ONNX Runtime and CTranslate2 engines follow their core share: each call runs on a session made for the share's
thread count (spinning only while the model computes alone), made from the weights in RAM, at most two kept."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypnos.config import settings_from_mapping
from hypnos.engine import CancelToken, SpeechInput, TranscriptionInput
from hypnos.kit.audio import wav_bytes
from hypnos.kit.thread_sessions import SessionKey
from hypnos.types import LayerPlacementPlan, MemoryTier
from hypnos_audio.kokoro import KokoroEngine

from .conftest import make_engine

pytestmark = pytest.mark.model

SPIN = "session.intra_op.allow_spinning"
TIER1 = LayerPlacementPlan(primary_tier=MemoryTier.TIER1)


def engine_apart(starter: tuple[Path, list[dict[str, Any]]], folder: Path, model_id: str, **process: Any) -> Any:
    """A fresh engine of a starter model whose files are copied into `folder` (a test may delete them)."""
    models_dir, tables = starter
    table = dict(next(t for t in tables if t["id"] == model_id))
    for key in ("weights_path", "tokenizer_path", "voices_path"):
        if key in table:
            source, copy = models_dir / table[key], folder / table[key]
            copy.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, copy, dirs_exist_ok=True)
            else:
                shutil.copyfile(source, copy)
    if process:
        table["process"] = process
    return make_engine(settings_from_mapping({"models_dir": str(folder), "models": [table]}), model_id)


@pytest.fixture(scope="module")
def spoken(kokoro: KokoroEngine) -> bytes:
    """A sentence spoken by Kokoro, as 24 kHz PCM bytes."""
    import asyncio

    async def speak() -> bytes:
        speech = SpeechInput(text="The quick brown fox jumps over the lazy dog.", voice="jf_alpha")
        return b"".join([c.pcm16 async for c in kokoro.speak(speech, CancelToken())])

    return asyncio.run(speak())


def ort_threads(session: Any) -> tuple[int, str]:
    """An ONNX Runtime session's intra-op threads and its spin setting."""
    options = session.get_session_options()
    return options.intra_op_num_threads, options.get_session_config_entry(SPIN)


async def speak(engine: Any) -> None:
    chunks = [chunk async for chunk in engine.speak(SpeechInput(text="Hello there.", voice="alloy"), CancelToken())]
    assert chunks


async def test_piper_follows_its_share_on_sessions_made_from_ram(
    starter_tables: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    engine = engine_apart(starter_tables, tmp_path, "piper-joe")
    await engine.load(TIER1)
    try:
        engine.weights_file.unlink()  # the sessions for later shares come from the bytes in RAM, not the disk
        assert await engine.follow_cores([0]) == 1  # another model computes beside it
        await speak(engine)
        sharing = engine.thread_sessions.picked()
        assert ort_threads(sharing.session) == (1, "0")  # one thread that sleeps when idle
        assert await engine.follow_cores([0, 1], alone=True) == 2
        await speak(engine)
        alone = engine.thread_sessions.picked()
        assert ort_threads(alone.session) == (2, "1")  # the cores to itself: two threads that may spin
        assert await engine.follow_cores([1]) == 1
        await speak(engine)
        assert engine.thread_sessions.picked() is sharing  # kept warm: picked again, not made again
        assert engine.thread_sessions.keys() == [SessionKey(2, True), SessionKey(1, False)]  # at most two
    finally:
        await engine.unload()


async def test_kokoro_follows_its_share(starter_tables: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    engine = engine_apart(starter_tables, tmp_path, "kokoro-82m")
    await engine.load(TIER1)
    try:
        assert await engine.follow_cores([3]) == 1
        chunks = [c async for c in engine.speak(SpeechInput(text="Hi.", voice="jf_alpha"), CancelToken())]
        assert chunks and ort_threads(engine.thread_sessions.picked()) == (1, "0")
    finally:
        await engine.unload()


async def test_one_thread_session_keeps_the_configured_session_and_drops_the_bytes(
    starter_tables: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    engine = engine_apart(starter_tables, tmp_path, "piper-joe", thread_sessions=1)
    size = engine.weights_file.stat().st_size
    assert engine.estimate().weight_bytes == 2 * size  # one session, about twice the file
    await engine.load(TIER1)
    try:
        assert engine._model_bytes is None  # the session took them over
        await engine.follow_cores([0])  # it cannot follow: the host's pinning holds it to the share
        await speak(engine)
        assert ort_threads(engine.thread_sessions.picked().session) == (0, "1")  # the configured one
    finally:
        await engine.unload()


async def test_whisper_follows_its_share_without_reading_the_files_again(
    starter_tables: tuple[Path, list[dict[str, Any]]], tmp_path: Path, spoken: bytes
) -> None:
    engine = engine_apart(starter_tables, tmp_path, "whisper-tiny.en")
    await engine.load(TIER1)
    try:
        shutil.rmtree(engine.model_dir)  # the models for later shares come from the files in RAM
        audio = TranscriptionInput(audio=wav_bytes(spoken, 24000))
        assert await engine.follow_cores([0, 1], alone=True) == 2
        await engine.transcribe(audio, CancelToken())
        two = engine.thread_sessions.picked()
        assert engine.thread_sessions.last == SessionKey(2, False)  # OpenMP's spinning is the host's environment's
        assert await engine.follow_cores([1]) == 1
        result = await engine.transcribe(audio, CancelToken())
        assert "fox" in result.text.lower()
        one = engine.thread_sessions.picked()
        assert engine.thread_sessions.last == SessionKey(1, False) and one is not two
        assert await engine.follow_cores([0, 1], alone=True) == 2
        await engine.transcribe(audio, CancelToken())
        assert engine.thread_sessions.picked() is two  # kept warm
    finally:
        await engine.unload()
