"""The docling engine: model-free docling pipelines plus RapidOCR, pages handed out as the conversion finishes them."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from hypnos.engine import CancelToken, DocumentInput, EngineUnavailable, MemoryEstimate, missing_library
from hypnos.kit.device_oom import onnxruntime_out_of_memory, torch_out_of_memory
from hypnos.kit.staged import StagedEngine
from hypnos.types import LayerPlacementPlan

from hypnos_docling.options import DoclingOptions
from hypnos_docling.standard import LAYOUT_FOLDER, check_standard

MiB = 1024 * 1024
# Measured on a 20-page PDF and a scanned page (RSS growth): docling-parse and docling-core imported and one
# document parsed ~120 MiB; RapidOCR's det/cls/rec sessions, built at the first page without text, ~280 MiB more.
LIBRARY_BYTES = 128 * MiB
OCR_BYTES = 224 * MiB
# Peak scratch of one conversion beyond that: parsed pages and one page rendered for OCR.
WORKSPACE_BYTES = 96 * MiB
# docling's standard pipeline: torch, its layout model and TableFormer in memory (not measured here: no machine of
# this project can load them; docling's own figures put the two models near 1 GiB with torch's runtime).
STANDARD_BYTES = 1536 * MiB
_END = object()


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_libraries() -> None:
    """503 naming the package when docling's backends or RapidOCR are not installed."""
    for module, package in (("docling", "docling-slim"), ("docling_parse", "docling-parse"), ("rapidocr", "rapidocr")):
        if importlib.util.find_spec(module) is None:
            raise missing_library(package, "hypnos-docling[docling]")


class DoclingEngine(StagedEngine):
    """Converts documents with docling's model-free backends; OCR with RapidOCR's bundled ONNX models."""

    options_table, options_type = "docling", DoclingOptions
    options: DoclingOptions

    def __init__(self, model: Any, context: Any) -> None:
        super().__init__(model, context)
        self._converter: Any = None
        self._artifacts = self._standard_artifacts()

    def _standard_artifacts(self) -> Path | None:
        """docling's model artifacts when the model asks for the standard pipeline (503 when it cannot run), else
        None: the plugin's own layout pass."""
        folder = self.model.resolve(self.context.models_dir, self.model.weights_path)
        pipeline = self.options.pipeline
        if pipeline is None:
            pipeline = "standard" if folder is not None and (folder / LAYOUT_FOLDER).exists() else "layout"
        if pipeline == "layout":
            return None
        artifacts_path = self.options.artifacts_path
        artifacts = self.model.resolve(self.context.models_dir, artifacts_path) if artifacts_path else folder
        if artifacts is None:
            raise EngineUnavailable(
                f"the model `{self.model.id}` asks for docling's standard pipeline: set `artifacts_path` in its "
                "[models.docling] table to the folder of docling's model artifacts"
            )
        check_standard(self.model.id, artifacts)
        return artifacts

    def device_oom(self, error: BaseException) -> bool:
        """torch.OutOfMemoryError (layout and table models), or ONNX Runtime's failed allocation (OCR)."""
        return torch_out_of_memory(error) or onnxruntime_out_of_memory(error)

    def estimate(self) -> MemoryEstimate:
        """The libraries and OCR sessions as they sit in memory, and one conversion's scratch (no weight files)."""
        check_libraries()
        models = STANDARD_BYTES if self._artifacts is not None else 0
        return MemoryEstimate(weight_bytes=LIBRARY_BYTES + OCR_BYTES + models, workspace_bytes=WORKSPACE_BYTES)

    def read_weights(self) -> None:
        """Import docling's backends (the warm copy is the imported libraries)."""
        check_libraries()
        import docling.backend.docling_parse_backend  # noqa: F401
        import docling_core.types.doc  # noqa: F401

    def build(self, plan: LayerPlacementPlan) -> None:
        """The converter, on the CPU."""
        from hypnos_docling.bounds import DocumentBounds
        from hypnos_docling.convert import Converter

        limits = self.context.limits
        bounds = DocumentBounds(
            max_image_pixels=limits.max_image_pixels,
            max_inflated_bytes=limits.max_document_inflated_bytes,
            page_timeout_secs=self.options.page_timeout_secs,
        )
        threads = max(1, self.options.threads or host_cores())
        standard = None
        if self._artifacts is not None:
            from hypnos_docling.standard import StandardConverter

            standard = StandardConverter(self._artifacts, threads)
        self._converter = Converter(threads=threads, max_pages=self.options.max_pages, bounds=bounds, standard=standard)
        self.device = "cpu"

    def release_device(self) -> None:
        """Drop the converter and its OCR sessions."""
        self._converter = None

    async def convert_document(self, document: DocumentInput, cancel: CancelToken) -> AsyncGenerator[Any, None]:
        """DocumentStarted, then one PageDone per page in order, each as soon as the conversion finishes it."""
        self.require_ready()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def emit(event: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        future = self.worker.submit(self._converter.convert, document, cancel, emit)
        future.add_done_callback(lambda _: queue.put_nowait(_END))
        try:
            while (event := await queue.get()) is not _END:
                yield event
            future.result()
        finally:
            if not future.done():
                cancel.cancel()  # the conversion stops at its next page
