"""Speech out: Kokoro-82M (ONNX) on ONNX Runtime, phrase by phrase on the model's own worker thread."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np
from hypnos.config import ModelConfig
from hypnos.engine import (
    AudioChunk,
    CancelToken,
    Engine,
    EngineContext,
    EngineUnavailable,
    MemoryEstimate,
    SpeechInput,
)
from hypnos.errors import invalid_request, server_error
from hypnos.types import LayerPlacementPlan, MemoryTier, TierSwitchPhases

from hypnos_audio import onnx_session
from hypnos_audio.phonemes import EspeakPhonemizer, group_phrases, split_phonemes, split_phrases, tokenize
from hypnos_audio.wav import to_pcm16
from hypnos.kit.worker import ModelWorker

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000
MiB = 1024 * 1024


class KokoroOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.kokoro]` table."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = 0
    espeak_language: str = "en-us"
    phrase_pause_ms: int = 180
    chunk_max_chars: int = 400
    min_speed: float = 0.5
    max_speed: float = 2.0
    warmup: bool = True
    # ONNX Runtime's arena grew by ~390 MiB synthesizing a 300-character chunk (int8 export, CPU)
    workspace_bytes: int = 384 * MiB


def trim_silence(audio: np.ndarray, top_db: float = 60.0, frame: int = 2048, hop: int = 512) -> np.ndarray:
    """Cut leading and trailing frames quieter than top_db below the loudest frame (as librosa's trim does)."""
    if audio.size == 0:
        return audio
    padded = np.pad(audio, frame // 2)
    count = 1 + (len(padded) - frame) // hop
    windows = np.lib.stride_tricks.as_strided(padded, (count, frame), (padded.strides[0] * hop, padded.strides[0]))
    power = np.mean(windows.astype(np.float64) ** 2, axis=1)
    reference = power.max()
    if reference <= 0:
        return audio
    loud = np.nonzero(10 * np.log10(np.maximum(power, 1e-10) / reference) > -top_db)[0]
    if loud.size == 0:
        return audio[:0]
    return audio[loud[0] * hop : min(len(audio), (loud[-1] + 1) * hop)]


def load_vocab(path: Path) -> dict[str, int]:
    """Kokoro's phoneme vocabulary from a vocab.json / config.json (`{"vocab": {...}}`) or a plain mapping."""
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = data.get("vocab", data) if isinstance(data, dict) else None
    if not isinstance(vocab, dict) or not vocab:
        raise EngineUnavailable(f"{path} holds no Kokoro vocabulary")
    return {str(k): int(v) for k, v in vocab.items()}


def load_voices(path: Path) -> dict[str, np.ndarray]:
    """The voice pack (an .npz of style tables), in the file's order."""
    with np.load(path) as pack:
        return {name: np.asarray(pack[name], dtype=np.float32) for name in pack.files}


class KokoroEngine(Engine):
    """Kokoro-82M: tier 1 = ONNX Runtime session created; tier 2 = model bytes warm in RAM; tier 3 = nothing."""

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self.options = msgspec.convert(model.engine_options.get("kokoro", {}), KokoroOptions)
        self.weights_file = self._required(model.weights_path, "weights_path")
        self.voices_file = self._required(model.voices_path, "voices_path")
        vocab = model.resolve(context.models_dir, model.tokenizer_path)
        self.vocab_file = vocab if vocab is not None else self.weights_file.parent / "vocab.json"
        self.tier = MemoryTier.TIER3
        self.device = "cpu"
        self.chunks_synthesized = 0
        self._model_bytes: bytes | None = None
        self._voices: dict[str, np.ndarray] | None = None
        self._vocab: dict[str, int] | None = None
        self._session: Any = None
        self._token_input = "tokens"
        self._phonemize: EspeakPhonemizer | None = None
        self._worker = ModelWorker(f"kokoro-{model.id}")
        self._fallbacks_logged: set[str] = set()

    def _required(self, relative: str | None, key: str) -> Path:
        path = self.model.resolve(self.context.models_dir, relative)
        if path is None:
            raise EngineUnavailable(f"the model `{self.model.id}` needs `{key}` for the kokoro_onnx engine")
        return path

    # ---- lifecycle ----------------------------------------------------------------------------------------------

    def estimate(self) -> MemoryEstimate:
        """From the file sizes: the session holds about twice the ONNX file (initializers plus prepacked copies,
        measured on the int8 export), plus the voice pack, plus the configured inference workspace."""
        try:
            weights = 2 * self.weights_file.stat().st_size + self.voices_file.stat().st_size
        except OSError as error:
            raise EngineUnavailable(f"the model `{self.model.id}` is missing a file: {error}") from error
        workspace = self.options.workspace_bytes
        return MemoryEstimate(weight_bytes=weights, non_layer_bytes=weights, workspace_bytes=workspace)

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        """Read the bytes (tier 2), then build the session, the phonemizer and warm it up (tier 1)."""
        return await self._worker.run(self._load_blocking, plan.primary_tier)

    async def demote(self, tier: MemoryTier) -> None:
        """Drop the session (tier 2 keeps the bytes warm) or everything (tier 3)."""
        await self._worker.run(self._demote_blocking, tier)

    async def unload(self) -> None:
        """Free everything and stop the worker thread."""
        await self.demote(MemoryTier.TIER3)
        self._worker.close()

    def _load_blocking(self, tier: MemoryTier) -> TierSwitchPhases:
        started = time.perf_counter()
        if self._model_bytes is None and self._session is None:
            self._model_bytes = self.weights_file.read_bytes()
        if self._voices is None:
            self._voices = load_voices(self.voices_file)
            if not self._voices:
                raise EngineUnavailable(f"the voice pack {self.voices_file} holds no voices")
        read_ms = (time.perf_counter() - started) * 1000
        if tier != MemoryTier.TIER1:
            self.tier = tier
            return TierSwitchPhases(load_mode="read", weights_ms=read_ms, total_ms=read_ms)
        session_started = time.perf_counter()
        if self._session is None:
            self._vocab = load_vocab(self.vocab_file)
            self._phonemize = EspeakPhonemizer(self.options.espeak_language)
            assert self._model_bytes is not None
            self._session = onnx_session.create_session(
                self._model_bytes, self.options.device, self.options.threads, f"kokoro `{self.model.id}`"
            )
            self.device = onnx_session.active_device(self._session)
            inputs = {item.name for item in self._session.get_inputs()}
            self._token_input = "input_ids" if "input_ids" in inputs else "tokens"
            self._model_bytes = None  # the session holds the weights now
            if self.options.warmup:
                self._infer_phonemes("ə", next(iter(self._voices)), 1.0)
        self.tier = MemoryTier.TIER1
        session_ms = (time.perf_counter() - session_started) * 1000
        total = read_ms + session_ms
        return TierSwitchPhases(load_mode="read", weights_ms=read_ms, context_ms=session_ms, total_ms=total)

    def _demote_blocking(self, tier: MemoryTier) -> None:
        self._session = None
        self._phonemize = None
        if tier == MemoryTier.TIER3:
            self._model_bytes = None
            self._voices = None
        elif self._model_bytes is None:
            self._model_bytes = self.weights_file.read_bytes()
        self.tier = tier
        self.device = "cpu"

    # ---- speech -------------------------------------------------------------------------------------------------

    def voices(self) -> list[str]:
        """The voice pack's voice names, in file order (empty below tier 2)."""
        return list(self._voices or {})

    def pick_voice(self, requested: str) -> str:
        """The requested voice when the pack has it, else the pack's first voice (logged: a warning once per voice)."""
        if not self._voices:
            raise server_error(f"the model `{self.model.id}` is not loaded")
        if requested in self._voices:
            return requested
        fallback = next(iter(self._voices))
        # a warning the first time per voice, then debug lines, so a pack without OpenAI voices does not flood the log
        level = logging.DEBUG if requested in self._fallbacks_logged else logging.WARNING
        self._fallbacks_logged.add(requested)
        logger.log(
            level, "model %s: the voice pack %s has no voice `%s`; using its first voice `%s`",
            self.model.id, self.voices_file.name, requested, fallback,
        )
        return fallback

    async def speak(self, speech: SpeechInput, cancel: CancelToken) -> AsyncIterator[AudioChunk]:  # type: ignore[override]
        """One AudioChunk per phrase chunk, each yielded as soon as it is synthesized; the next runs meanwhile."""
        if self._session is None:
            raise server_error(f"the model `{self.model.id}` is not loaded")
        voice = self.pick_voice(speech.voice)
        speed = min(max(speech.speed, self.options.min_speed), self.options.max_speed)
        phrases = group_phrases(split_phrases(speech.text), self.options.chunk_max_chars)
        if not phrases:
            raise invalid_request("`input` has nothing to speak")
        pause = np.zeros(SAMPLE_RATE * self.options.phrase_pause_ms // 1000, dtype="<i2").tobytes()
        pending: asyncio.Future[np.ndarray] | None = None
        produced = 0
        try:
            pending = self._worker.submit(self._synthesize, phrases[0], voice, speed, cancel)
            for index in range(len(phrases)):
                audio = await pending
                pending = None
                if cancel.cancelled:
                    return
                if index + 1 < len(phrases):
                    pending = self._worker.submit(self._synthesize, phrases[index + 1], voice, speed, cancel)
                if audio.size == 0:
                    continue
                pcm = to_pcm16(audio)
                yield AudioChunk(pcm16=pause + pcm if produced else pcm, sample_rate=SAMPLE_RATE)
                produced += 1
        finally:
            if pending is not None:
                pending.add_done_callback(_ignore_result)
        if not produced:
            raise invalid_request("`input` has nothing Kokoro can pronounce")

    def _synthesize(self, phrase: str, voice: str, speed: float, cancel: CancelToken) -> np.ndarray:
        """One phrase to float audio (worker thread): phonemes, batches of <= 510, inference, trimmed silence."""
        if cancel.cancelled or self._session is None or self._phonemize is None or self._vocab is None:
            return np.zeros(0, dtype=np.float32)
        vocab = self._vocab
        phonemes = "".join(p for p in self._phonemize(phrase) if p in vocab)
        parts = [self._infer_phonemes(piece, voice, speed) for piece in split_phonemes(phonemes)]
        self.chunks_synthesized += 1
        parts = [part for part in parts if part.size]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def _infer_phonemes(self, phonemes: str, voice: str, speed: float) -> np.ndarray:
        assert self._vocab is not None and self._voices is not None
        tokens = tokenize(phonemes, self._vocab)
        if not tokens:
            return np.zeros(0, dtype=np.float32)
        table = self._voices[voice]
        style = table[min(len(tokens), len(table)) - 1].reshape(1, -1)
        try:
            outputs = self._session.run(None, {
                self._token_input: np.array([[0, *tokens, 0]], dtype=np.int64),
                "style": style.astype(np.float32),
                "speed": np.array([speed], dtype=np.float32),
            })
        except Exception as error:
            raise server_error(f"Kokoro inference failed: {error}") from error
        return trim_silence(np.asarray(outputs[0], dtype=np.float32).ravel())


def _ignore_result(future: asyncio.Future[Any] | Future[Any]) -> None:
    """Retrieve an abandoned phrase's outcome so its exception is not reported as never retrieved."""
    if not future.cancelled():
        future.exception()
