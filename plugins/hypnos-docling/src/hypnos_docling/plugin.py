"""The `docling` entry point: the engine kind, the document routes and the starter document model; cheap to import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos.config import ModelConfig
from hypnos.engine import Engine, EngineContext, EngineKind
from hypnos.hookspecs import hookimpl
from hypnos.types import Modality

from hypnos_docling.options import DoclingOptions

DOCLING_KIND = "docling"
STARTER_ID = "docling"


def make_docling_engine(model: ModelConfig, context: EngineContext) -> Engine:
    """A docling engine (the library loads when the model does)."""
    from hypnos_docling.engine import DoclingEngine

    return DoclingEngine(model, context)


@hookimpl
def hypnos_engine_kinds() -> list[EngineKind]:
    """Docling document conversion."""
    return [
        EngineKind(
            DOCLING_KIND,
            frozenset({Modality.DOCUMENT_CONVERSION}),
            make_docling_engine,
            description="Docling document conversion (PDF, DOCX, PPTX, XLSX, HTML, Markdown, images) with OCR",
            options={"docling": DoclingOptions},
            process_nice=10,  # a batch engine: chats and speech keep their cores while a long document converts
        )
    ]


@hookimpl
def hypnos_routes() -> list[Any]:
    """POST /v1/documents/convert and the picture store routes."""
    from hypnos_docling.route import ROUTES

    return list(ROUTES)


@hookimpl
def hypnos_starter_models(models_dir: Path) -> list[dict[str, Any]]:
    """The model-free docling converter (no weight files), when docling's backends are installed."""
    import importlib.util

    if importlib.util.find_spec("docling") is None or importlib.util.find_spec("rapidocr") is None:
        return []
    return [{"id": STARTER_ID, "modality": "document_conversion", "engine": DOCLING_KIND}]
