"""docling whose OCR (RapidOCR on ONNX Runtime) fails with ONNX Runtime's own RuntimeException for a failed
allocation, the first calls. Imported in the engine host (PYTHONPATH names this folder)."""

from __future__ import annotations

import os
from typing import Any

from hypnos.testing.device_oom import OOM_TIMES_ENV
from hypnos.types import LayerPlacementPlan, TierSwitchPhases
from hypnos_docling.engine import DoclingEngine

ORT_ARENA = "BFCArena::AllocateRawInternal Failed to allocate memory for requested buffer of size 67108864"


class FailingOcr:
    """RapidOCR's callable, raising ONNX Runtime's RuntimeException the first calls."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.left = inner, int(os.environ.get(OOM_TIMES_ENV, "1"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.left > 0:
            from onnxruntime.capi.onnxruntime_pybind11_state import RuntimeException

            self.left -= 1
            raise RuntimeException(ORT_ARENA)
        return self.inner(*args, **kwargs)


class OomDocling(DoclingEngine):
    """docling whose OCR runs out of device memory."""

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        phases = await super().load(plan)
        from rapidocr import RapidOCR

        converter = self._converter
        assert converter is not None
        converter._ocr = FailingOcr(RapidOCR(params={"EngineConfig.onnxruntime.intra_op_num_threads": 1}))
        return phases
