"""The engine conformance suite (hypnos.testing.conformance) for Kokoro and whisper on the starter weights."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypnos.config import Settings
from hypnos.engine import CancelToken, EngineContext, SpeechInput, TranscriptionInput
from hypnos.kit.audio import wav_bytes
from hypnos.testing.conformance import ConformanceTarget, MissingLibrary
from hypnos_audio import plugin

pytestmark = pytest.mark.model

PHRASES = "The sun is bright. Birds are singing. We walk to the park. Then we go home."


def _kind(name: str):  # type: ignore[no-untyped-def]
    return next(kind for kind in plugin.hypnos_engine_kinds() if kind.name == name)


def _context(settings: Settings) -> EngineContext:
    return EngineContext(models_dir=settings.models_path, limits=settings.limits)


async def _speak(engine, cancel: CancelToken) -> list:  # type: ignore[no-untyped-def]
    return [chunk async for chunk in engine.speak(SpeechInput(text=PHRASES, voice="jf_alpha"), cancel)]


async def _speak_nothing(engine, cancel: CancelToken) -> list:  # type: ignore[no-untyped-def]
    return [chunk async for chunk in engine.speak(SpeechInput(text="   ", voice="jf_alpha"), cancel)]


@pytest.fixture(params=["kokoro_onnx", "faster_whisper"])
def conformance_engine(request: pytest.FixtureRequest, starter_settings: Settings) -> ConformanceTarget:
    """Kokoro (phrase by phrase) and whisper (segment by segment) on the starter models."""
    model = next(m for m in starter_settings.models if m.engine == request.param)
    context = _context(starter_settings)
    if request.param == "kokoro_onnx":
        hidden = ("onnxruntime", "onnxruntime-gpu")
        missing = MissingLibrary("onnxruntime", modules=("onnxruntime",), distributions=hidden)
        return ConformanceTarget(_kind("kokoro_onnx"), model, context, _speak, bad_request=_speak_nothing,
                                 missing_library=missing)  # fmt: skip
    clip = request.getfixturevalue("three_sentences")

    async def transcribe(engine, cancel: CancelToken):  # type: ignore[no-untyped-def]
        return await engine.transcribe(TranscriptionInput(audio=clip), cancel)

    async def garbage(engine, cancel: CancelToken):  # type: ignore[no-untyped-def]
        return await engine.transcribe(TranscriptionInput(audio=b"RIFF\x00\x00\x00\x00WAVEfmt \x02"), cancel)

    missing = MissingLibrary("faster-whisper", modules=("faster_whisper", "ctranslate2"))
    return ConformanceTarget(_kind("faster_whisper"), model, context, transcribe, bad_request=garbage,
                             missing_library=missing)  # fmt: skip


@pytest.fixture(scope="module")
def three_sentences(kokoro) -> bytes:  # type: ignore[no-untyped-def]
    """Three sentences spoken by Kokoro with pauses, as a WAV (whisper answers them in several segments)."""
    chunks = asyncio.run(_speak(kokoro, CancelToken()))
    pcm = b"".join(chunk.pcm16 for chunk in chunks)
    pause = np.zeros(24000, dtype="<i2").tobytes()
    return wav_bytes(pcm + pause + pcm, 24000)
