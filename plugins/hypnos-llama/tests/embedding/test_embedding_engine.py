"""The embedding engine on the real all-MiniLM-L6-v2 weights, converted offline to GGUF."""

from __future__ import annotations

import numpy as np
import pytest
from bert_reference import reference_embeddings
from hypnos.config import settings_from_mapping
from hypnos.engine import CancelToken, EngineContext
from hypnos.types import LayerPlacementPlan, MemoryTier
from hypnos_llama.embedding.engine import LlamaEmbeddingEngine
from hypnos_llama.gguf_meta import read_gguf

pytestmark = pytest.mark.model

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market fell sharply on Tuesday.",
    "Ünïcödé naïve café résumé — with punctuation!",
    "word " * 200,
]


def _engine(models_dir, table, **llama) -> LlamaEmbeddingEngine:
    settings = settings_from_mapping({"models_dir": str(models_dir), "models": [{**table, "llama": llama}]})
    return LlamaEmbeddingEngine(settings.models[0], EngineContext(models_dir=models_dir, limits=settings.limits))


@pytest.fixture
async def loaded(minilm_models_dir):
    engine = _engine(*minilm_models_dir)
    await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
    yield engine
    await engine.unload()


def test_converted_gguf_says_pooling_and_normalization(minilm_models_dir) -> None:
    models_dir, table = minilm_models_dir
    gguf = read_gguf(models_dir / table["weights_path"])
    assert gguf.arch == "bert"
    assert gguf.arch_value("pooling_type") == 1  # mean, from 1_Pooling/config.json
    assert gguf.metadata["hypnos.embedding.normalize"] is True  # the pipeline ends with Normalize


async def test_vectors_match_an_independent_reference(loaded, minilm_source) -> None:
    result = await loaded.embed(TEXTS, CancelToken())
    ours = np.array(result.vectors)
    reference = reference_embeddings(minilm_source, TEXTS)
    cosines = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
    assert cosines.min() >= 0.99
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-4)
    assert result.prompt_tokens > len(TEXTS)


async def test_an_input_longer_than_the_model_takes_is_a_400(loaded) -> None:
    from hypnos.errors import HypnosError

    with pytest.raises(HypnosError) as raised:
        await loaded.embed(["short", "word " * 400], CancelToken())
    assert raised.value.status == 400 and raised.value.code == "context_length_exceeded"
    assert "input[1]" in raised.value.message


async def test_token_ids_embed_like_their_text(loaded) -> None:
    from hypnos.errors import HypnosError

    tokens = loaded._context.tokens(TEXTS[0])
    by_text, by_ids = (await loaded.embed([TEXTS[0]], CancelToken())), (await loaded.embed([tokens], CancelToken()))
    assert np.allclose(by_text.vectors[0], by_ids.vectors[0], atol=1e-6)
    with pytest.raises(HypnosError) as raised:
        await loaded.embed([[10**9]], CancelToken())
    assert raised.value.status == 400 and "vocabulary" in raised.value.message


@pytest.mark.parametrize("weight_type", ["f32", "f16", "bf16"])
async def test_every_weight_type_converts_and_matches_the_reference(weight_type, minilm_source, tmp_path) -> None:
    from hypnos_llama.embedding.starter import embedding_starter_models

    (table,) = embedding_starter_models(tmp_path, weight_type=weight_type)
    assert table["weights_path"].endswith(f".{weight_type}.gguf")
    engine = _engine(tmp_path, table)
    await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
    try:
        ours = np.array((await engine.embed(TEXTS[:4], CancelToken())).vectors)
    finally:
        await engine.unload()
    reference = reference_embeddings(minilm_source, TEXTS[:4])
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    assert (ours * reference).sum(1).min() >= 0.999


async def test_similar_sentences_score_higher_than_unrelated(loaded) -> None:
    vectors = np.array((await loaded.embed(TEXTS[:3], CancelToken())).vectors)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3


async def test_many_short_inputs_share_decodes_and_keep_order(loaded) -> None:
    texts = [f"sentence number {i} about topic {i % 7}" for i in range(64)]
    context = loaded._context
    before = context.decodes
    result = await loaded.embed(texts, CancelToken())
    vectors, decodes = result.vectors, context.decodes - before
    assert decodes <= -(-result.prompt_tokens // context.pack_tokens) + 1 < len(texts)
    one_by_one = np.array([(await loaded.embed([text], CancelToken())).vectors[0] for text in texts[:5]])
    # Packed or alone, a text gets the same vector up to float rounding (unit vectors: the dot is the cosine).
    assert (np.array(vectors[:5]) * one_by_one).sum(1).min() >= 0.99999
    assert (np.array(vectors[1:6]) * one_by_one).sum(1).max() < 0.999  # and each vector is its own text's


async def test_tier_moves(minilm_models_dir) -> None:
    engine = _engine(*minilm_models_dir)
    phases = await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER2))
    assert phases.context_ms is None and phases.weights_ms is not None  # tier 2 reads pages, builds no context
    with pytest.raises(Exception, match="not loaded"):
        await engine.embed(["x"], CancelToken())
    await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
    first = (await engine.embed(["hello"], CancelToken())).vectors
    await engine.demote(MemoryTier.TIER2)
    await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
    assert np.allclose((await engine.embed(["hello"], CancelToken())).vectors, first)
    await engine.demote(MemoryTier.TIER3)


async def test_vectors_match_sentence_transformers_when_installed(loaded, minilm_source) -> None:
    """The issue's reference: sentence-transformers on the same weights (skipped where torch is not installed)."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    model = sentence_transformers.SentenceTransformer(str(minilm_source), device="cpu")
    reference = model.encode(TEXTS, normalize_embeddings=True)
    ours = np.array((await loaded.embed(TEXTS, CancelToken())).vectors)
    assert (ours * reference).sum(1).min() >= 0.99
