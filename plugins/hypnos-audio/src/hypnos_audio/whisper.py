"""Speech in: whisper models in CTranslate2 format on faster-whisper, on the model's own worker thread."""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np
from hypnos.config import ModelConfig
from hypnos.engine import (
    CancelToken,
    Engine,
    EngineContext,
    EngineUnavailable,
    MemoryEstimate,
    TranscriptionInput,
    TranscriptionResult,
    missing_library,
)
from hypnos.errors import invalid_request, server_error
from hypnos.types import EngineTiming, LayerPlacementPlan, MemoryTier, TierSwitchPhases

from hypnos_audio.ct2_model import resident_bytes
from hypnos_audio.wav import read_wav
from hypnos.kit.worker import ModelWorker

logger = logging.getLogger(__name__)

WHISPER_RATE = 16000
MiB = 1024 * 1024


class WhisperOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.whisper]` table."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    compute_type: str = "default"
    cpu_threads: int = 0
    beam_size: int = 5
    vad_filter: bool = False
    condition_on_previous_text: bool = True
    workspace_bytes: int = 128 * MiB


def import_faster_whisper() -> Any:
    """The faster_whisper module, or the missing-library error naming the extra."""
    try:
        import faster_whisper
    except ImportError as error:
        raise missing_library("faster-whisper", "hypnos-audio[whisper]") from error
    return faster_whisper


def resample(samples: np.ndarray, rate: int, target: int = WHISPER_RATE) -> np.ndarray:
    """Mono float audio resampled to target Hz with PyAV's resampler (as faster-whisper decodes)."""
    if rate == target or samples.size == 0:
        return samples.astype(np.float32)
    import av

    frame = av.AudioFrame.from_ndarray(
        (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16).reshape(1, -1), format="s16", layout="mono"
    )
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="s16", layout="mono", rate=target)
    frames = [*resampler.resample(frame), *resampler.resample(None)]
    if not frames:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32) / 32768.0


def decode_audio(data: bytes) -> tuple[np.ndarray, float]:
    """16 kHz mono float samples and the duration: WAV read here (duration from its header), others by PyAV."""
    wav = read_wav(data)
    if wav is not None:
        return resample(wav.samples, wav.sample_rate), wav.header_duration_secs
    decoder = import_faster_whisper()
    try:
        samples = decoder.decode_audio(io.BytesIO(data), sampling_rate=WHISPER_RATE)
    except Exception as error:  # PyAV raises several error types for undecodable input
        reason = type(error).__name__
        raise invalid_request(f"the audio file could not be decoded ({reason}); send a 16-bit PCM WAV") from error
    return samples, len(samples) / WHISPER_RATE


def whisper_language(language: str | None) -> str | None:
    """An ISO 639-1 code as whisper expects it (`en-US` -> `en`), or None to let the model detect it."""
    if not language or not language.strip():
        return None
    return language.strip().lower().replace("_", "-").split("-")[0]


class WhisperEngine(Engine):
    """A whisper model: tier 1 = WhisperModel built; tier 2 = model files warm in RAM; tier 3 = nothing."""

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self.options = msgspec.convert(model.engine_options.get("whisper", {}), WhisperOptions)
        folder = model.resolve(context.models_dir, model.weights_path)
        if folder is None:
            raise EngineUnavailable(f"the model `{model.id}` needs `weights_path` (a CTranslate2 whisper folder)")
        self.model_dir = folder
        self.tier = MemoryTier.TIER3
        self.device = "cpu"
        self._files: dict[str, bytes] | None = None
        self._auto_device: str | None = None
        self._whisper: Any = None
        self._worker = ModelWorker(f"whisper-{model.id}")

    def _model_files(self) -> list[Path]:
        if not (self.model_dir / "model.bin").is_file():
            raise EngineUnavailable(f"the model `{self.model.id}`: no model.bin in {self.model_dir}")
        return sorted(p for p in self.model_dir.iterdir() if p.is_file())

    # ---- lifecycle ----------------------------------------------------------------------------------------------

    def estimate(self) -> MemoryEstimate:
        """model.bin's weights as they will sit in memory (read from its headers: float16 widens to float32 on a
        CPU, int8 halves it), the other files as sized on disk, and a fixed decoding workspace."""
        files = self._model_files()
        model_bin = self.model_dir / "model.bin"
        loaded = resident_bytes(model_bin, self.options.compute_type, self._resolve_device())
        weights = sum(p.stat().st_size for p in files if loaded is None or p != model_bin) + (loaded or 0)
        workspace = self.options.workspace_bytes
        return MemoryEstimate(weight_bytes=weights, non_layer_bytes=weights, workspace_bytes=workspace)

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        """Read the files (tier 2), then build the CTranslate2 model from them (tier 1)."""
        return await self._worker.run(self._load_blocking, plan.primary_tier)

    async def demote(self, tier: MemoryTier) -> None:
        """Drop the model (tier 2 keeps the files warm) or everything (tier 3)."""
        await self._worker.run(self._demote_blocking, tier)

    async def unload(self) -> None:
        """Free everything and stop the worker thread."""
        await self.demote(MemoryTier.TIER3)
        self._worker.close()

    def _resolve_device(self) -> str:
        if self.options.device != "auto":
            return self.options.device
        if self._auto_device is None:
            try:
                import ctranslate2
            except ImportError as error:
                raise missing_library("faster-whisper", "hypnos-audio[whisper]") from error
            self._auto_device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        return self._auto_device

    def _load_blocking(self, tier: MemoryTier) -> TierSwitchPhases:
        started = time.perf_counter()
        faster_whisper = import_faster_whisper()
        if self._files is None and self._whisper is None:
            self._files = {p.name: p.read_bytes() for p in self._model_files()}
        read_ms = (time.perf_counter() - started) * 1000
        if tier != MemoryTier.TIER1:
            self.tier = tier
            return TierSwitchPhases(load_mode="read", weights_ms=read_ms, total_ms=read_ms)
        built = time.perf_counter()
        if self._whisper is None:
            assert self._files is not None
            device = self._resolve_device()
            try:
                self._whisper = faster_whisper.WhisperModel(
                    str(self.model_dir), device=device, compute_type=self.options.compute_type,
                    cpu_threads=self.options.cpu_threads, files=dict(self._files),
                )
            except ValueError as error:
                raise EngineUnavailable(f"the model `{self.model.id}` cannot run on {device}: {error}") from error
            self.device = str(getattr(self._whisper.model, "device", device))
            if device == "cuda" and self.device != "cuda":
                raise EngineUnavailable(f"the model `{self.model.id}` asked for CUDA but runs on {self.device}")
            logger.info("whisper `%s` on %s (%s)", self.model.id, self.device, self.options.compute_type)
            self._files = None  # CTranslate2 holds the weights now
        self.tier = MemoryTier.TIER1
        build_ms = (time.perf_counter() - built) * 1000
        return TierSwitchPhases(load_mode="read", weights_ms=read_ms, context_ms=build_ms, total_ms=read_ms + build_ms)

    def _demote_blocking(self, tier: MemoryTier) -> None:
        self._whisper = None
        if tier == MemoryTier.TIER3:
            self._files = None
        elif self._files is None:
            self._files = {p.name: p.read_bytes() for p in self._model_files()}
        self.tier = tier
        self.device = "cpu"

    # ---- transcription ------------------------------------------------------------------------------------------

    async def transcribe(self, audio: TranscriptionInput, cancel: CancelToken) -> TranscriptionResult:
        """The transcript, the duration (WAV header when WAV), engine.audio_secs and engine.rtf."""
        if self._whisper is None:
            raise server_error(f"the model `{self.model.id}` is not loaded")
        return await self._worker.run(self._transcribe_blocking, audio, cancel)

    def _transcribe_blocking(self, job: TranscriptionInput, cancel: CancelToken) -> TranscriptionResult:
        started = time.perf_counter()
        samples, duration = decode_audio(job.audio)
        if samples.size == 0:
            raise invalid_request("the audio file holds no samples")
        try:
            segments, _ = self._whisper.transcribe(
                samples,
                language=whisper_language(job.language),
                initial_prompt=job.prompt or None,
                beam_size=self.options.beam_size,
                vad_filter=self.options.vad_filter,
                condition_on_previous_text=self.options.condition_on_previous_text,
            )
            texts = []
            for segment in segments:  # lazy: each segment is decoded on iteration
                texts.append(segment.text)
                if cancel.cancelled:
                    break
        except ValueError as error:
            raise invalid_request(f"whisper refused the request: {error}") from error
        elapsed = time.perf_counter() - started
        audio_secs = samples.size / WHISPER_RATE
        timing = EngineTiming(audio_secs=round(audio_secs, 3), rtf=round(elapsed / audio_secs, 4))
        return TranscriptionResult(text="".join(texts).strip(), duration_secs=round(duration, 3), timing=timing)
