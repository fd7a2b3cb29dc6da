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
    alone = np.array(single.data[0].embedding)
    assert np.array(batch.data[1].embedding) @ alone >= 0.99999  # unit vectors: the dot is the cosine
    assert np.array(batch.data[0].embedding) @ alone < 0.99


def test_vectors_carry_float32_precision_not_float64_noise(server: str) -> None:
    import httpx

    body = {"model": "all-minilm-l6-v2", "input": "A man is eating food.", "encoding_format": "float"}
    response = httpx.post(f"{server}/v1/embeddings", json=body, timeout=120)
    assert response.status_code == 200
    text = response.text
    numbers = text[text.index('"embedding":[') + 13 : text.index("]", text.index('"embedding":['))].split(",")
    assert len(numbers) == 384
    digits = [len(n.lstrip("-").split("e")[0].replace(".", "").lstrip("0")) for n in numbers]
    assert max(digits) <= 9  # float32 holds about 7.2 significant digits; float64 noise would print 16-17
    vector = np.array([float(n) for n in numbers])
    assert abs(np.linalg.norm(vector) - 1.0) < 1e-6
