"""The real all-MiniLM-L6-v2 through the real server (granian) and the OpenAI SDK's embeddings.create."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypnos_llama.testing import toml_model_config
from hypnos_server.testing import live_server

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def server(minilm_models_dir: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("hypnos_server.cli")
    models_dir, table = minilm_models_dir
    config = tmp_path_factory.mktemp("embed-server") / "hypnos.toml"
    config.write_text(toml_model_config(models_dir, [table]))
    with live_server(config) as base:
        yield base


@pytest.fixture
def client(server: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)


def test_similar_sentences_score_higher_through_the_sdk(client: Any) -> None:
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply."]
    response = client.embeddings.create(model="all-minilm-l6-v2", input=texts, encoding_format="float")
    assert [item.index for item in response.data] == [0, 1, 2]
    vectors = np.array([item.embedding for item in response.data])
    assert vectors.shape == (3, 384)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3
    assert response.usage.prompt_tokens > 3


def test_input_order_is_kept_and_a_single_string_works(client: Any) -> None:
    batch = client.embeddings.create(model="all-minilm-l6-v2", input=["first text", "second, other text"])
    single = client.embeddings.create(model="all-minilm-l6-v2", input="second, other text")
    assert len(single.data) == 1
    assert np.allclose(batch.data[1].embedding, single.data[0].embedding, atol=1e-4)
    assert not np.allclose(batch.data[0].embedding, single.data[0].embedding, atol=1e-2)
