"""docling's standard PDF pipeline (its layout model and TableFormer) where a user's machine has them.

`[models.docling] pipeline = "standard"` with `artifacts_path` (a folder holding docling's model artifacts, e.g.
`docling-project--docling-layout-heron` and `docling-project--docling-models`), or a model folder that holds them,
runs PDFs through docling's own DocumentConverter instead of the plugin's layout pass. It needs docling's model
libraries (docling-ibm-models, torch, torchvision, transformers); without them the model answers 503 naming what is
missing. The whole document is converted first, then its pages are handed out in order.
"""

from __future__ import annotations

import importlib.util
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from hypnos.engine import CancelToken, DocumentInput, EngineUnavailable
from hypnos.kit.staged import check_cancelled

from hypnos_docling.events import DocumentStarted, PageDone
from hypnos_docling.md_text import markdown_of

LAYOUT_FOLDER = "docling-project--docling-layout-heron"
LIBRARIES = (
    ("docling_ibm_models", "docling-ibm-models"),
    ("torch", "torch"),
    ("torchvision", "torchvision"),
    ("transformers", "transformers"),
)


def check_standard(model_id: str, artifacts: Path) -> None:
    """503 naming the missing libraries, or the missing artifacts folder."""
    missing = [package for module, package in LIBRARIES if importlib.util.find_spec(module) is None]
    if missing:
        raise EngineUnavailable(
            f"the model `{model_id}` asks for docling's standard layout pipeline (its layout model and TableFormer), "
            f"which needs {', '.join(missing)} (not installed here). Install them (`pip install docling`) or set "
            '`pipeline = "layout"` to use the plugin\'s own layout pass'
        )
    if not artifacts.is_dir():
        raise EngineUnavailable(f"the model `{model_id}`: docling's model artifacts are not in `{artifacts}`")


def pictures_by_page(doc: Any, pictures_of: Callable[[Any, int], list[Any]]) -> dict[int, list[Any]]:
    """The pictures of a whole-document DoclingDocument, each encoded once, by the page it lies on."""
    by_page: dict[int, list[Any]] = {}
    for picture, item in zip(pictures_of(doc, 0), doc.pictures, strict=True):
        if item.prov:
            page_no = item.prov[0].page_no
            by_page.setdefault(page_no, []).append(msgspec.structs.replace(picture, page=page_no))
    return by_page


class StandardConverter:
    """docling's DocumentConverter with the standard PDF pipeline, built once per model."""

    def __init__(self, artifacts: Path, threads: int) -> None:
        from docling.datamodel.base_models import InputFormat
        from docling.datamodel.pipeline_options import PdfPipelineOptions
        from docling.document_converter import DocumentConverter, PdfFormatOption

        options = PdfPipelineOptions(artifacts_path=str(artifacts), do_table_structure=True)
        options.generate_picture_images = True
        options.accelerator_options.num_threads = threads
        self._converters: dict[bool, Any] = {}
        for ocr in (True, False):
            copy = options.model_copy(update={"do_ocr": ocr})
            self._converters[ocr] = DocumentConverter(
                format_options={InputFormat.PDF: PdfFormatOption(pipeline_options=copy)}
            )

    def convert(
        self, job: DocumentInput, numbers: list[int], page_count: int, cancel: CancelToken,
        emit: Callable[[Any], None], pictures_of: Callable[[Any, int], list[Any]],
    ) -> None:  # fmt: skip
        """Convert the requested pages, then emit DocumentStarted and one PageDone a page."""
        from docling.datamodel.base_models import DocumentStream

        emit(DocumentStarted(page_count=page_count, pages=numbers, format="pdf"))
        started = time.perf_counter()
        source = DocumentStream(name=job.filename or "document.pdf", stream=io.BytesIO(job.data))
        result = self._converters[job.ocr].convert(source, page_range=(numbers[0], numbers[-1]))
        doc = result.document
        pictures = pictures_by_page(doc, pictures_of)
        for page_no in numbers:
            check_cancelled(cancel)
            emit(
                PageDone(
                    page=page_no,
                    markdown=markdown_of(doc, page_no),
                    tables=sum(1 for table in doc.tables if table.prov and table.prov[0].page_no == page_no),
                    pictures=pictures.get(page_no, []),
                    ms=round((time.perf_counter() - started) * 1000, 3),
                    json=doc.filter(page_nrs={page_no}).export_to_dict() if job.output_format == "json" else None,
                )
            )
            started = time.perf_counter()
