"""The starter speech engines with their library failing to allocate device memory (the first calls), raised at the
library's own call sites with its own types: ONNX Runtime's RuntimeException from a session's run (Kokoro, Piper), a
CTranslate2 RuntimeError from whisper's model. Imported in the engine hosts (PYTHONPATH names this folder)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypnos.kit.thread_sessions import SessionKey
from hypnos.testing.device_oom import Failing
from hypnos.types import LayerPlacementPlan, TierSwitchPhases
from hypnos_audio.kokoro import KokoroEngine
from hypnos_audio.piper import PiperEngine
from hypnos_audio.whisper import WhisperEngine

ORT_ARENA = (
    "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running MatMul node. "
    "Status Message: BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 268435456"
)
CT2_CUDA = "CUDA failed with error out of memory"


class Shared(Failing):
    """Failing whose failures left are its engine's, shared by all the engine's sessions: a retry may run on the
    session made for the core share the engine heard of meanwhile."""

    def __init__(self, engine: Any, inner: Any, method: str, error: Callable[[], BaseException]) -> None:
        self._engine = engine
        super().__init__(inner, method, error)

    @property  # type: ignore[override]
    def _left(self) -> int:
        return int(self._engine.failures_left)

    @_left.setter
    def _left(self, value: int) -> None:
        left = getattr(self._engine, "failures_left", None)
        if left is None or value < left:  # a later session's start leaves the count as it is
            self._engine.failures_left = value


def ort_error() -> Exception:
    """ONNX Runtime's own exception type for a failed arena allocation."""
    from onnxruntime.capi.onnxruntime_pybind11_state import RuntimeException

    return RuntimeException(ORT_ARENA)


class OomKokoro(KokoroEngine):
    """Kokoro whose ONNX Runtime sessions run out of device memory (those made after the load's own warm-up run)."""

    loaded = False

    def new_session(self, key: SessionKey) -> Any:
        session = super().new_session(key)
        return Shared(self, session, "run", ort_error) if self.loaded else session

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        phases = await super().load(plan)
        self.loaded = True
        if self.thread_sessions is not None:
            self.thread_sessions.clear()  # the next call makes its session again
        return phases


class OomPiper(PiperEngine):
    """Piper whose ONNX Runtime sessions run out of device memory."""

    def new_session(self, key: SessionKey) -> Any:
        return Shared(self, super().new_session(key), "run", ort_error)


class OomWhisper(WhisperEngine):
    """whisper whose CTranslate2 models run out of device memory."""

    def new_session(self, key: SessionKey) -> Any:
        return Shared(self, super().new_session(key), "transcribe", lambda: RuntimeError(CT2_CUDA))
