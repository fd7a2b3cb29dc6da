"""The starter speech engines with their library failing to allocate device memory (the first calls), raised at the
library's own call sites with its own types: ONNX Runtime's RuntimeException from a session's run (Kokoro, Piper), a
CTranslate2 RuntimeError from whisper's model. Imported in the engine hosts (PYTHONPATH names this folder)."""

from __future__ import annotations

from typing import Any

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


def ort_error() -> Exception:
    """ONNX Runtime's own exception type for a failed arena allocation."""
    from onnxruntime.capi.onnxruntime_pybind11_state import RuntimeException

    return RuntimeException(ORT_ARENA)


class OomKokoro(KokoroEngine):
    """Kokoro whose ONNX Runtime session runs out of device memory (after the load's own warm-up run)."""

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        phases = await super().load(plan)
        self._session = Failing(self._session, "run", ort_error)
        return phases


class OomPiper(PiperEngine):
    """Piper whose ONNX Runtime session runs out of device memory."""

    def open_session(self) -> Any:
        return Failing(super().open_session(), "run", ort_error)


class OomWhisper(WhisperEngine):
    """whisper whose CTranslate2 model runs out of device memory."""

    def build(self, plan: LayerPlacementPlan) -> None:
        super().build(plan)
        self._whisper = Failing(self._whisper, "transcribe", lambda: RuntimeError(CT2_CUDA))
