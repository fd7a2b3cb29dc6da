"""The real all-MiniLM-L6-v2 through the OpenAI Node SDK (npm `openai`, tests/node), which asks for base64 first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypnos_server.testing import node_call, node_sdk, node_sdk_calls

pytestmark = pytest.mark.model
NODE_DIR = Path(__file__).resolve().parents[4] / "tests" / "node"
MODEL = "all-minilm-l6-v2"
TEXTS = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply."]


@pytest.fixture(scope="module")
def node_dir() -> Path:
    """tests/node with the pinned OpenAI Node SDK installed (fails without node and npm)."""
    return node_sdk(NODE_DIR)


@pytest.fixture
def client(embedding_server: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{embedding_server}/v1", api_key="unused", max_retries=0, timeout=120)


def embed(node_dir: Path, server: str, *bodies: dict[str, Any]) -> list[dict[str, Any]]:
    """The Node SDK's embeddings.create for each body: {"value"} or {"error"}."""
    return node_sdk_calls(node_dir, server, [node_call("embeddings.create", body) for body in bodies])


def vectors(result: dict[str, Any]) -> np.ndarray:
    """The embeddings of one successful call, as float32 rows."""
    return np.array([item["embedding"] for item in result["value"]["data"]], dtype=np.float32)


def test_default_base64_decodes_to_the_python_sdk_vectors(node_dir: Path, embedding_server: str, client: Any) -> None:
    [result] = embed(node_dir, embedding_server, {"model": MODEL, "input": TEXTS})
    from_node = vectors(result)
    as_floats = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float").data
    python_default = client.embeddings.create(model=MODEL, input=TEXTS).data  # the Python SDK's own base64 default
    assert from_node.shape == (3, 384) and np.all(np.abs(np.linalg.norm(from_node, axis=1) - 1) < 1e-5)
    assert np.array_equal(from_node, np.array([d.embedding for d in as_floats], dtype=np.float32))
    assert np.array_equal(from_node, np.array([d.embedding for d in python_default], dtype=np.float32))
    assert from_node[0] @ from_node[1] > from_node[0] @ from_node[2] + 0.3


def test_token_id_inputs_embed_like_their_texts(
    node_dir: Path, embedding_server: str, minilm_models_dir: tuple[Path, dict]
) -> None:
    import llama_cpp

    models_dir, table = minilm_models_dir
    vocab = llama_cpp.Llama(str(models_dir / table["weights_path"]), vocab_only=True, verbose=False)
    ids = [vocab.tokenize(text.encode(), add_bos=True, special=False) for text in TEXTS[:2]]
    by_text, by_ids, one = embed(
        node_dir,
        embedding_server,
        {"model": MODEL, "input": TEXTS[:2]},
        {"model": MODEL, "input": ids},
        {"model": MODEL, "input": ids[1]},
    )
    texts = vectors(by_text)
    assert np.all(np.sum(vectors(by_ids) * texts, axis=1) >= 0.99999)
    assert vectors(one)[0] @ texts[1] >= 0.99999 and vectors(one)[0] @ texts[0] < 0.99


def test_dimensions_and_too_long_inputs(node_dir: Path, embedding_server: str) -> None:
    not_trained, full, short, too_long = embed(
        node_dir,
        embedding_server,
        {"model": MODEL, "input": "a text", "dimensions": 64},
        {"model": "minilm-matryoshka", "input": "a text"},
        {"model": "minilm-matryoshka", "input": "a text", "dimensions": 64},
        {"model": MODEL, "input": ["fine", "word " * 400]},
    )
    error = not_trained["error"]
    assert error["name"] == "BadRequestError" and error["status"] == 400 and "dimensions" in error["message"]
    whole, cut = vectors(full)[0], vectors(short)[0]
    assert cut.shape == (64,) and np.allclose(cut, whole[:64] / np.linalg.norm(whole[:64]), atol=1e-6)
    error = too_long["error"]
    assert error["status"] == 400 and error["code"] == "context_length_exceeded" and "input[1]" in error["message"]
