"""End to end with the OpenAI Node SDK (npm `openai`): what a JavaScript client sends by default is answered right."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from hypnos_server.testing import live_server, node_call, node_sdk, node_sdk_calls

NODE_DIR = Path(__file__).parent / "node"
API_KEY = "node-key"
CONFIG = """
[[models]]
id = "fake-embed"
modality = "embeddings"
engine = "fake"
"""


@pytest.fixture(scope="module")
def node_dir() -> Path:
    """tests/node with the pinned OpenAI Node SDK installed (fails without node and npm)."""
    return node_sdk(NODE_DIR)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("node") / "hypnos.toml"
    config.write_text(CONFIG)
    env = {"HYPNOS_API_KEYS": API_KEY, "HYPNOS_PLUGINS": "fake"}
    with live_server(config, env=env, ready_timeout=60, ready_path="/health") as base:
        yield base


def test_node_sdk_default_embeddings_equal_the_python_sdk_floats(node_dir: Path, server: str) -> None:
    """The Node SDK asks for base64 by default and decodes it; the vectors must be the float vectors, not zeros."""
    texts = ["first text", "a second, longer text"]
    [result] = node_sdk_calls(
        node_dir, server, [node_call("embeddings.create", {"model": "fake-embed", "input": texts})], api_key=API_KEY
    )
    from_node = [item["embedding"] for item in result["value"]["data"]]
    client = openai.OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0)
    from_python = [
        d.embedding for d in client.embeddings.create(model="fake-embed", input=texts, encoding_format="float").data
    ]
    assert len(from_node) == len(from_python) == 2
    for node_vector, python_vector in zip(from_node, from_python, strict=True):
        assert len(node_vector) == len(python_vector)
        assert any(value != 0 for value in node_vector)
        for got, want in zip(node_vector, python_vector, strict=True):
            assert abs(got - want) <= 1e-6 * max(1.0, abs(want))
