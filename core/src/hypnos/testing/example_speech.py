"""The speech example of core/README.md: a whole speech engine on StagedEngine, what it receives and returns. Its
"voices" speak each word as a short tone, standing where a TTS library's synthesis would."""

from __future__ import annotations

import math
import struct
from collections.abc import AsyncGenerator

from hypnos.engine import AudioChunk, CancelToken, EngineCapabilities, EngineKind, MemoryEstimate, SpeechInput
from hypnos.errors import invalid_request
from hypnos.kit.staged import StagedEngine, check_cancelled
from hypnos.types import LayerPlacementPlan, Modality

SAMPLE_RATE = 24000  # the rate the chunks say; the speech route writes it in the WAV header (realtime resamples)
PITCHES = {"low": 220.0, "high": 440.0}  # the "voice pack": what read_weights would read from the model's files


def phrases(text: str) -> list[str]:
    """The text cut at sentence ends: each phrase is synthesized, and streamed, on its own."""
    return [part.strip() for part in text.replace("!", ".").replace("?", ".").split(".") if part.strip()]


class ToneSpeechEngine(StagedEngine):
    """Tier 2: the voice pack in RAM; tier 1: the voices ready to synthesize."""

    def estimate(self) -> MemoryEstimate:
        return MemoryEstimate(weight_bytes=1 << 20)

    def read_weights(self) -> None:
        self.pack = dict(PITCHES)

    def build(self, plan: LayerPlacementPlan) -> None:
        self.voices = dict(self.pack)

    def release_device(self) -> None:
        self.voices = {}

    def release_warm(self) -> None:
        self.pack = {}

    def capabilities(self) -> EngineCapabilities:
        # GET /v1/models lists the voices; the speech route turns `alloy` into `high` and an unknown name into `low`
        return EngineCapabilities(voices=list(PITCHES), voice_aliases={"alloy": "high", "echo": "low"})

    async def speak(self, speech: SpeechInput, cancel: CancelToken) -> AsyncGenerator[AudioChunk, None]:
        """16-bit mono PCM, one AudioChunk per phrase: `speech.voice` is one of the voices (the route picked it),
        `speech.speed` in 0.25..4, `speech.language` a hint."""
        self.require_ready()  # the one "not loaded" error: 503 model_not_available
        parts = phrases(speech.text)
        if not parts:
            raise invalid_request("`input` has nothing to speak")
        pitch = self.voices[speech.voice] if speech.voice in self.voices else PITCHES["low"]
        for phrase in parts:
            check_cancelled(cancel)  # every step: the host's watchdog reads it as progress
            pcm = await self.run_blocking(self._synthesize, phrase, pitch, speech.speed)  # on the model's worker
            yield AudioChunk(pcm16=pcm, sample_rate=SAMPLE_RATE)

    def _synthesize(self, phrase: str, pitch: float, speed: float) -> bytes:
        count = int(SAMPLE_RATE * 0.1 * len(phrase.split()) / speed)
        return b"".join(
            struct.pack("<h", int(8000 * math.sin(2 * math.pi * pitch * i / SAMPLE_RATE))) for i in range(count)
        )


def speech_engine_kind() -> EngineKind:
    """The `tones` engine kind: text to speech, reported as the API's onnx_runtime."""
    return EngineKind("tones", frozenset({Modality.TEXT_TO_SPEECH}), ToneSpeechEngine, spec_kind="onnx_runtime")
