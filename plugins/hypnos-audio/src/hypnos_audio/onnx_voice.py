"""What the ONNX voices (Kokoro, Piper) share: the weights file and the file beside it, the estimate, the model bytes
in RAM at tier 2 and the ONNX Runtime session they become at tier 1."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from hypnos.config import ModelConfig
from hypnos.engine import EngineContext, EngineUnavailable, MemoryEstimate
from hypnos.kit.device_oom import onnxruntime_out_of_memory
from hypnos.kit.staged import StagedEngine

from hypnos_audio import onnx_session


class OnnxVoiceEngine(StagedEngine):
    """A voice in one ONNX file: tier 2 = the file's bytes in RAM, tier 1 = a session made from them (it takes them
    over), tier 3 = nothing. `companion_file` is `tokenizer_path`, else the file `beside(weights_file)` names."""

    build_consumes_warm_copy = True  # the session takes the model bytes
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
        """From the file sizes: the session holds about twice the ONNX file (initializers plus ONNX Runtime's prepacked
        copies, measured on Kokoro's int8 export), plus the held files and the configured inference workspace."""
        try:
            weights = 2 * self.weights_file.stat().st_size + sum(path.stat().st_size for path in self.held_files())
        except OSError as error:
            raise EngineUnavailable(f"the model `{self.model.id}` is missing a file: {error}") from error
        workspace = self.options.workspace_bytes
        return MemoryEstimate(weight_bytes=weights, non_layer_bytes=weights, workspace_bytes=workspace)

    def read_weights(self) -> None:
        """Tier 2: the ONNX bytes in RAM."""
        self._model_bytes = self.weights_file.read_bytes()

    def open_session(self) -> Any:
        """An ONNX Runtime session from the bytes in RAM (which it takes over) on the configured device."""
        assert self._model_bytes is not None
        name = f"{self.label} `{self.model.id}`"
        session = onnx_session.create_session(self._model_bytes, self.options.device, self.options.threads, name)
        self.device = onnx_session.active_device(session)
        self._model_bytes = None
        return session

    def release_warm(self) -> None:
        """Tier 2 -> 3: drop the model bytes."""
        self._model_bytes = None
