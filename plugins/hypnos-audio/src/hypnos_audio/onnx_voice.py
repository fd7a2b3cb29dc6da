"""What the ONNX voices (Kokoro, Piper) share: the weights file and the file beside it, the estimate, the model bytes
in RAM at tier 2 and the ONNX Runtime sessions they become at tier 1 (one per thread count, hypnos.kit.thread_sessions:
ONNX Runtime fixes a session's threads and spin policy when it makes it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from hypnos.config import ModelConfig
from hypnos.engine import EngineContext, EngineUnavailable, MemoryEstimate
from hypnos.kit.device_oom import onnxruntime_out_of_memory
from hypnos.kit.staged import StagedEngine
from hypnos.kit.thread_sessions import SessionKey, ThreadSessions, session_limit, sessions_bytes

from hypnos_audio import onnx_session

T = TypeVar("T")


class OnnxVoiceEngine(StagedEngine):
    """A voice in one ONNX file: tier 2 = the file's bytes in RAM, tier 1 = sessions made from them (one session takes
    them over; several keep them to make the next), tier 3 = nothing. `companion_file` is `tokenizer_path`, else the
    file `beside(weights_file)` names."""

    build_consumes_warm_copy = True  # the session takes the model bytes (one session: open_sessions says)
    label: ClassVar[str] = "voice"  # how log lines and errors name the engine

    def __init__(self, model: ModelConfig, context: EngineContext, beside: Callable[[Path], Path]) -> None:
        super().__init__(model, context)
        self.weights_file = self.model_path("weights_path")
        self.companion_file = self.model_path("tokenizer_path", default=beside(self.weights_file))
        self._model_bytes: bytes | None = None

    def held_files(self) -> list[Path]:
        """Further files the engine holds in RAM from tier 2 on (Kokoro's voice pack)."""
        return []

    def device_oom(self, error: BaseException) -> bool:
        """ONNX Runtime's failed allocation (its arena or the CUDA provider): Kokoro and Piper."""
        return onnxruntime_out_of_memory(error)

    def estimate(self) -> MemoryEstimate:
        """From the file sizes: a session holds about twice the ONNX file (initializers plus ONNX Runtime's prepacked
        copies, measured on Kokoro's int8 export), times the sessions kept (plus the file they are made from), plus
        the held files and the configured inference workspace."""
        try:
            size = self.weights_file.stat().st_size
            held = sum(path.stat().st_size for path in self.held_files())
        except OSError as error:
            raise EngineUnavailable(f"the model `{self.model.id}` is missing a file: {error}") from error
        weights = sessions_bytes(2 * size, size, self._session_limit(size)) + held
        workspace = self.options.workspace_bytes
        return MemoryEstimate(weight_bytes=weights, non_layer_bytes=weights, workspace_bytes=workspace)

    def _session_limit(self, size: int) -> int:
        return session_limit(self.model, 2 * size, self.options.device, self.context.accelerator)

    def read_weights(self) -> None:
        """Tier 2: the ONNX bytes in RAM."""
        self._model_bytes = self.weights_file.read_bytes()

    def open_sessions(self, wrap: Callable[[Any], T]) -> ThreadSessions[T]:
        """The voice's sessions per thread count, each `wrap`ped (Piper's PiperVoice), made from the bytes in RAM;
        the one for the share now is made at once. One session takes the bytes over; several keep them."""
        assert self._model_bytes is not None
        limit = self._session_limit(len(self._model_bytes))
        sessions = ThreadSessions(
            lambda key: wrap(self.new_session(key)), threads=self.options.threads, spin=True, limit=limit
        )
        sessions.session(self.core_threads, self.core_alone)
        self.thread_sessions = sessions
        self.build_consumes_warm_copy = limit == 1
        if limit == 1:
            self._model_bytes = None
        return sessions

    def new_session(self, key: SessionKey) -> Any:
        """An ONNX Runtime session with the key's intra-op threads and spin policy, from the bytes in RAM."""
        assert self._model_bytes is not None
        name = f"{self.label} `{self.model.id}`"
        session = onnx_session.create_session(self._model_bytes, self.options.device, key.threads, name, key.spin)
        self.device = onnx_session.active_device(session)
        return session

    def release_device(self) -> None:
        """Tier 1 -> 2: drop the sessions."""
        self.thread_sessions = None

    def release_warm(self) -> None:
        """Tier 2 -> 3: drop the model bytes."""
        self._model_bytes = None
