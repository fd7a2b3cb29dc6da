"""Speech in: whisper models in CTranslate2 format on faster-whisper, on the model's own worker thread (one model per
thread count, hypnos.kit.thread_sessions: CTranslate2 fixes its intra_threads when it builds a model)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hypnos.config import ModelConfig
from hypnos.engine import (
    CancelToken,
    EngineContext,
    EngineUnavailable,
    MemoryEstimate,
    TranscriptionInput,
    TranscriptionResult,
    TranscriptionSegment,
    missing_library,
)
from hypnos.errors import invalid_request
from hypnos.kit.audio import transcription_audio
from hypnos.kit.device_oom import ctranslate2_out_of_memory, onnxruntime_out_of_memory
from hypnos.kit.staged import ModelNotLoaded, StagedEngine, check_cancelled
from hypnos.kit.thread_sessions import SessionKey, ThreadSessions, session_limit, sessions_bytes
from hypnos.types import EngineTiming, LayerPlacementPlan

from hypnos_audio.ct2_model import resident_bytes
from hypnos_audio.options import WhisperOptions

logger = logging.getLogger(__name__)

WHISPER_RATE = 16000


def import_faster_whisper() -> Any:
    """The faster_whisper module, or the missing-library error naming the extra."""
    try:
        import faster_whisper
    except ImportError as error:
        raise missing_library("faster-whisper", "hypnos-audio[whisper]") from error
    return faster_whisper


def whisper_language(language: str | None) -> str | None:
    """An ISO 639-1 code as whisper expects it (`en-US` -> `en`), or None to let the model detect it."""
    if not language or not language.strip():
        return None
    return language.strip().lower().replace("_", "-").split("-")[0]


class WhisperEngine(StagedEngine):
    """A whisper model: tier 1 = WhisperModels built (one per thread count: several keep the files in RAM to build the
    next); tier 2 = model files in RAM; tier 3 = nothing."""

    options_table = "whisper"
    options_type = WhisperOptions
    build_consumes_warm_copy = True  # CTranslate2 takes the file bytes (one model: build says)

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self.options: WhisperOptions
        self.model_dir = self.model_path()  # a CTranslate2 whisper folder
        self._files: dict[str, bytes] | None = None
        self._auto_device: str | None = None

    def _model_files(self) -> list[Path]:
        if not (self.model_dir / "model.bin").is_file():
            raise EngineUnavailable(f"the model `{self.model.id}`: no model.bin in {self.model_dir}")
        return sorted(p for p in self.model_dir.iterdir() if p.is_file())

    # ---- lifecycle ----------------------------------------------------------------------------------------------

    def device_oom(self, error: BaseException) -> bool:
        """CTranslate2's failed allocation (the model), or ONNX Runtime's (the VAD)."""
        return ctranslate2_out_of_memory(error) or onnxruntime_out_of_memory(error)

    def estimate(self) -> MemoryEstimate:
        """model.bin's weights as they will sit in memory (read from its headers: float16 widens to float32 on a
        CPU, int8 halves it), the other files as sized on disk, times the models kept per thread count (plus the
        files they are built from), and a fixed decoding workspace."""
        one, files = self._session_bytes()
        weights = sessions_bytes(one, files, self._session_limit(one))
        workspace = self.options.workspace_bytes
        return MemoryEstimate(weight_bytes=weights, non_layer_bytes=weights, workspace_bytes=workspace)

    def _session_bytes(self) -> tuple[int, int]:
        """What one built model holds, and the model files' bytes."""
        files = self._model_files()
        model_bin = self.model_dir / "model.bin"
        loaded = resident_bytes(model_bin, self.options.compute_type, self._resolve_device())
        one = sum(p.stat().st_size for p in files if loaded is None or p != model_bin) + (loaded or 0)
        return one, sum(p.stat().st_size for p in files)

    def _session_limit(self, one: int) -> int:
        return session_limit(self.model, one, self._resolve_device())

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

    def read_weights(self) -> None:
        """Tier 2: every file of the model folder in RAM."""
        import_faster_whisper()
        self._files = {p.name: p.read_bytes() for p in self._model_files()}

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 1: the CTranslate2 model for the core share now (the configured threads before any share), built
        from the files in RAM on the configured (or detected) device; one model takes the files over."""
        assert self._files is not None
        limit = self._session_limit(self._session_bytes()[0])
        sessions = ThreadSessions(self.new_session, threads=self.options.cpu_threads, spin=False, limit=limit)
        sessions.session(self.core_threads, self.core_alone)
        self.thread_sessions = sessions
        self.build_consumes_warm_copy = limit == 1
        if limit == 1:
            self._files = None  # CTranslate2 holds the weights now

    def new_session(self, key: SessionKey) -> Any:
        """A WhisperModel whose CTranslate2 model computes with the key's intra_threads (0: CTranslate2's default),
        from the files in RAM (OpenMP's spin policy is the host's environment's: the key's spin is always off)."""
        assert self._files is not None
        device = self._resolve_device()
        try:
            whisper = import_faster_whisper().WhisperModel(
                str(self.model_dir), device=device, compute_type=self.options.compute_type,
                cpu_threads=key.threads, files=dict(self._files),
            )  # fmt: skip
        except ValueError as error:
            raise EngineUnavailable(f"the model `{self.model.id}` cannot run on {device}: {error}") from error
        actual = str(getattr(whisper.model, "device", device))
        if device == "cuda" and actual != "cuda":
            raise EngineUnavailable(f"the model `{self.model.id}` asked for CUDA but runs on {actual}")
        self.device = actual
        logger.info("whisper `%s` on %s (%s, %s threads)", self.model.id, self.device, self.options.compute_type,
                    key.threads or "default")  # fmt: skip
        return whisper

    def release_device(self) -> None:
        """Drop the CTranslate2 models."""
        self.thread_sessions = None

    def release_warm(self) -> None:
        """Drop the files."""
        self._files = None

    # ---- transcription ------------------------------------------------------------------------------------------

    async def transcribe(self, audio: TranscriptionInput, cancel: CancelToken) -> TranscriptionResult:
        """The transcript, the duration (WAV header when WAV), engine.audio_secs and engine.rtf."""
        self.require_ready()
        return await self.run_blocking(self._transcribe_blocking, audio, cancel)

    def _transcribe_blocking(self, job: TranscriptionInput, cancel: CancelToken) -> TranscriptionResult:
        started = time.perf_counter()
        decoded = transcription_audio(job, sample_rate=WHISPER_RATE, max_seconds=self.options.max_audio_secs)
        samples = decoded.samples
        if samples.size == 0:
            raise invalid_request("the audio file holds no samples")
        sessions = self.thread_sessions
        if sessions is None:  # demoted while this call waited on the worker
            raise ModelNotLoaded(self.model.id)
        check_cancelled(cancel)  # the client left while the audio was queued or decoded
        whisper = sessions.session(self.core_threads, self.core_alone)  # the one for the core share now
        try:
            segments, info = whisper.transcribe(
                samples,
                language=whisper_language(job.language),
                initial_prompt=job.prompt or None,
                beam_size=self.options.beam_size,
                vad_filter=self.options.vad_filter,
                condition_on_previous_text=self.options.condition_on_previous_text,
            )
            timed = []
            for segment in segments:  # lazy: each segment is decoded on iteration
                timed.append(TranscriptionSegment(start=round(segment.start, 3), end=round(segment.end, 3),
                                                  text=segment.text))  # fmt: skip
                if cancel.cancelled:
                    break
        except ValueError as error:  # the library's text stays in the log
            logger.info("whisper refused a request: %s", error)
            raise invalid_request("whisper could not transcribe this audio; send a 16-bit PCM WAV") from error
        elapsed = time.perf_counter() - started
        audio_secs = samples.size / WHISPER_RATE
        timing = EngineTiming(audio_secs=round(audio_secs, 3), rtf=round(elapsed / audio_secs, 4))
        return TranscriptionResult(
            text="".join(s.text for s in timed).strip(), duration_secs=round(decoded.duration_secs, 3),
            segments=timed, language=getattr(info, "language", None), timing=timing,
        )  # fmt: skip
