"""The engine conformance suite (hypnos.testing.conformance) for the docling engine, in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import CancelToken, DocumentInput, EngineContext
from hypnos.testing.conformance import ConformanceTarget, MissingLibrary
from hypnos.types import Modality
from hypnos_docling import plugin, testing


async def _collect(engine: Any, document: DocumentInput, cancel: CancelToken) -> list[Any]:
    return [event async for event in engine.convert_document(document, cancel)]


@pytest.fixture
def conformance_engine(tmp_path: Path) -> ConformanceTarget:
    """The docling engine converting a 6-page PDF (the cancel token is checked at every page)."""
    [kind] = plugin.hypnos_engine_kinds()
    model = ModelConfig(id="docling", modality=Modality.DOCUMENT_CONVERSION, engine="docling")
    context = EngineContext(models_dir=tmp_path, limits=LimitsConfig())
    pdf = testing.long_pdf(6)

    async def request(engine: Any, cancel: CancelToken) -> list[Any]:
        return await _collect(engine, DocumentInput(data=pdf, filename="six.pdf"), cancel)

    async def bad_request(engine: Any, cancel: CancelToken) -> list[Any]:
        return await _collect(engine, DocumentInput(data=b"\x00 not a document", filename="x.bin"), cancel)

    missing = MissingLibrary("docling-slim", modules=("docling",), distributions=("docling-slim",))
    return ConformanceTarget(kind, model, context, request, bad_request=bad_request, missing_library=missing)
