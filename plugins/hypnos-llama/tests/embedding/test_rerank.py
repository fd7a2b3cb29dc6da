"""Reranking on llama.cpp's rank pooling: a tiny random BERT cross-encoder converted to GGUF, scored by the engine
against an independent numpy forward pass, and served on POST /v1/rerank (engine host, as deployed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bert_reference import reference_rerank_scores
from hypnos.config import settings_from_mapping
from hypnos.engine import CancelToken, EngineContext, RerankInput
from hypnos.plugins import make_plugin_manager
from hypnos.types import LayerPlacementPlan, MemoryTier
from hypnos_llama import plugin as llama_plugin
from hypnos_llama.embedding.convert_bert import convert_bert
from hypnos_llama.embedding.engine import LlamaEmbeddingEngine
from hypnos_llama.gguf_meta import read_gguf
from hypnos_llama.testing_rerank import cross_encoder_ids, write_tiny_cross_encoder
from litestar.testing import AsyncTestClient

pytestmark = pytest.mark.model

QUERY = "what is the capital of france"
DOCUMENTS = [
    "paris is the capital of france",
    "berlin is the capital of germany",
    "the cat sat on the mat",
    "a man is eating bread",
    "the stock market fell",
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The cross-encoder's folder, its reranker GGUF, and the same encoder converted as a plain embedding model."""
    root = tmp_path_factory.mktemp("rerank")
    source = write_tiny_cross_encoder(root / "source")
    reranker = convert_bert(source, root / "models" / "tiny-reranker.gguf", weight_type="f32")
    plain = write_tiny_cross_encoder(root / "plain")
    config = (plain / "config.json").read_text().replace("BertForSequenceClassification", "BertModel")
    (plain / "config.json").write_text(config)
    embedder = convert_bert(plain, root / "models" / "tiny-embedder.gguf", weight_type="f32")
    return {"source": source, "reranker": reranker, "embedder": embedder}


def _table(model_id: str, path: Path) -> dict[str, Any]:
    return {"id": model_id, "modality": "embeddings", "engine": "ggml_llama", "weights_path": path.name}


@pytest.fixture
async def engine(models: dict[str, Path]) -> AsyncIterator[LlamaEmbeddingEngine]:
    folder = models["reranker"].parent
    settings = settings_from_mapping({"models_dir": str(folder), "models": [_table("tiny", models["reranker"])]})
    loaded = LlamaEmbeddingEngine(settings.models[0], EngineContext(models_dir=folder, limits=settings.limits))
    await loaded.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
    yield loaded
    await loaded.unload()


def test_a_cross_encoder_converts_to_a_rank_pooling_gguf_with_its_head(models: dict[str, Path]) -> None:
    gguf = read_gguf(models["reranker"])
    assert gguf.arch == "bert" and gguf.arch_value("pooling_type") == 4  # LLAMA_POOLING_TYPE_RANK
    names = {tensor.name for tensor in gguf.tensors}
    assert {"cls.weight", "cls.bias", "cls.output.weight", "cls.output.bias"} <= names
    plain = read_gguf(models["embedder"])
    assert plain.arch_value("pooling_type") == 1  # mean: no head, an embedding model
    assert not any(tensor.name.startswith("cls") for tensor in plain.tensors)


async def test_scores_match_an_independent_forward_pass_and_do_not_depend_on_the_batch(
    engine: LlamaEmbeddingEngine, models: dict[str, Path]
) -> None:
    result = await engine.rerank(RerankInput(query=QUERY, documents=DOCUMENTS), CancelToken())
    sequences = [cross_encoder_ids(QUERY, document) for document in DOCUMENTS]
    reference = reference_rerank_scores(models["source"], sequences)
    assert len(result.scores) == len(DOCUMENTS)
    assert np.allclose(result.scores, reference, atol=1e-2), (
        result.scores,
        reference.tolist(),
    )  # ggml: GELU from an f16 table
    assert np.ptp(reference) > 1.0  # the documents really score apart, so the order is the model's
    assert result.prompt_tokens == sum(len(ids) for ids in sequences)
    alone = await engine.rerank(RerankInput(query=QUERY, documents=[DOCUMENTS[3]]), CancelToken())
    reordered = await engine.rerank(RerankInput(query=QUERY, documents=DOCUMENTS[::-1]), CancelToken())
    assert alone.scores[0] == pytest.approx(result.scores[3], abs=1e-5)
    assert reordered.scores[::-1] == pytest.approx(result.scores, abs=1e-5)


async def test_an_embedding_call_on_a_reranker_is_a_400(engine: LlamaEmbeddingEngine) -> None:
    from hypnos.errors import HypnosError

    with pytest.raises(HypnosError) as refused:
        await engine.embed(["paris"], CancelToken())
    assert refused.value.status == 400 and "/v1/rerank" in refused.value.message


@pytest.fixture
async def client(models: dict[str, Path]) -> AsyncIterator[AsyncTestClient[Any]]:
    from hypnos_server.app import create_app

    tables = [_table("tiny-reranker", models["reranker"]), _table("tiny-embedder", models["embedder"])]
    settings = settings_from_mapping({"models_dir": str(models["reranker"].parent), "models": tables})
    app = create_app(settings, make_plugin_manager(autoload=False, plugins=[llama_plugin]))
    async with AsyncTestClient(app) as test_client:
        for _ in range(400):
            if (await test_client.get("/ready")).status_code == 200:
                break
            await asyncio.sleep(0.05)
        yield test_client


async def test_rerank_route_orders_by_the_models_scores_and_honours_top_n(
    client: AsyncTestClient[Any], models: dict[str, Path]
) -> None:
    body = {"model": "tiny-reranker", "query": QUERY, "documents": DOCUMENTS, "return_documents": True}
    response = await client.post("/v1/rerank", json=body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    reference = reference_rerank_scores(models["source"], [cross_encoder_ids(QUERY, d) for d in DOCUMENTS])
    assert [r["index"] for r in results] == sorted(range(len(DOCUMENTS)), key=lambda i: -reference[i])
    assert [r["document"]["text"] for r in results] == [DOCUMENTS[r["index"]] for r in results]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert np.allclose([reference[r["index"]] for r in results], scores, atol=1e-2)
    top = await client.post("/v1/rerank", json={**body, "top_n": 2, "return_documents": False})
    assert top.json()["results"] == [
        {"index": r["index"], "relevance_score": r["relevance_score"]} for r in results[:2]
    ]
    assert response.json()["usage"]["prompt_tokens"] > len(DOCUMENTS)


async def test_the_route_refuses_an_embedding_model_and_a_document_past_the_sequence_length(
    client: AsyncTestClient[Any],
) -> None:
    wrong = await client.post("/v1/rerank", json={"model": "tiny-embedder", "query": QUERY, "documents": ["paris"]})
    assert wrong.status_code == 400 and "not a reranker" in wrong.json()["error"]["message"]
    long = " ".join(["paris"] * 200)
    too_long = await client.post("/v1/rerank", json={"model": "tiny-reranker", "query": QUERY, "documents": [long]})
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
    embedded = await client.post("/v1/embeddings", json={"model": "tiny-reranker", "input": "paris"})
    assert embedded.status_code == 400 and "/v1/rerank" in embedded.json()["error"]["message"]
