"""The engine conformance suite (hypnos.testing.conformance) for the embedding engine on all-MiniLM-L6-v2."""

from __future__ import annotations

import pytest
from hypnos.config import settings_from_mapping
from hypnos.engine import CancelToken, EngineContext
from hypnos.testing.conformance import ConformanceTarget, MissingLibrary
from hypnos_llama import plugin

pytestmark = pytest.mark.model

TEXTS = [f"Sentence number {i} is about something else entirely." for i in range(6)]


async def _embed(engine, cancel: CancelToken):  # type: ignore[no-untyped-def]
    return await engine.embed(TEXTS, cancel)


@pytest.fixture
def conformance_engine(minilm_models_dir) -> ConformanceTarget:  # type: ignore[no-untyped-def]
    """The converted MiniLM GGUF through the ggml_llama kind (its factory picks the embedding engine)."""
    models_dir, table = minilm_models_dir
    settings = settings_from_mapping({"models_dir": str(models_dir), "models": [table]})
    (kind,) = plugin.hypnos_engine_kinds()
    context = EngineContext(models_dir=models_dir, limits=settings.limits)
    missing = MissingLibrary("llama-cpp-python", modules=("llama_cpp",))
    return ConformanceTarget(kind, settings.models[0], context, _embed, missing_library=missing)
