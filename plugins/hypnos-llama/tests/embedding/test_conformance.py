"""The engine conformance suite (hypnos.testing.conformance) for the embedding engine on all-MiniLM-L6-v2."""

from __future__ import annotations

import pytest
from hypnos.config import settings_from_mapping
from hypnos.engine import CancelToken, EngineContext
from hypnos.testing.conformance import ConformanceTarget, EmbeddingFacts, MissingLibrary
from hypnos_llama import plugin

pytestmark = pytest.mark.model

TEXTS = [f"Sentence number {i} is about something else entirely." for i in range(6)]
# all-MiniLM-L6-v2's WordPiece ids of the text ([CLS] ... [SEP]), its vocabulary and max_seq_length
FACTS = EmbeddingFacts("A man is eating food.", [101, 1037, 2158, 2003, 5983, 2833, 1012, 102], 30522, 256)


async def _embed(engine, cancel: CancelToken):  # type: ignore[no-untyped-def]
    return await engine.embed(TEXTS, cancel)


async def _embed_others(engine, cancel: CancelToken):  # type: ignore[no-untyped-def]
    return await engine.embed([FACTS.text, *TEXTS[:2]], cancel)


async def _embed_ids(engine, cancel: CancelToken):  # type: ignore[no-untyped-def]
    return await engine.embed([FACTS.token_ids, TEXTS[3]], cancel)


async def _out_of_vocabulary(engine, cancel: CancelToken):  # type: ignore[no-untyped-def]
    return await engine.embed(["fine", [FACTS.vocab_size]], cancel)


@pytest.fixture
def conformance_engine(minilm_models_dir) -> ConformanceTarget:  # type: ignore[no-untyped-def]
    """The converted MiniLM GGUF through the ggml_llama kind (its factory picks the embedding engine)."""
    models_dir, table = minilm_models_dir
    settings = settings_from_mapping({"models_dir": str(models_dir), "models": [table]})
    (kind,) = plugin.hypnos_engine_kinds()
    context = EngineContext(models_dir=models_dir, limits=settings.limits)
    missing = MissingLibrary("llama-cpp-python", modules=("llama_cpp",))
    variants = [_embed_others, _embed_ids]
    return ConformanceTarget(kind, settings.models[0], context, _embed, bad_request=_out_of_vocabulary,
                             variants=variants, embedding=FACTS, missing_library=missing)  # fmt: skip
