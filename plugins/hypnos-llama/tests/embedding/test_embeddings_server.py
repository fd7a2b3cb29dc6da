"""The real all-MiniLM-L6-v2 through the real server (granian) and the OpenAI SDK's embeddings.create."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def server(embedding_server: str) -> str:
    """The shared embedding server (conftest)."""
    return embedding_server


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


def test_token_id_inputs_embed_like_their_texts(client: Any, minilm_models_dir: tuple[Path, dict]) -> None:
    import llama_cpp

    models_dir, table = minilm_models_dir
    vocab = llama_cpp.Llama(str(models_dir / table["weights_path"]), vocab_only=True, verbose=False)
    ids = [vocab.tokenize(text.encode(), add_bos=True, special=False) for text in ("first text", "other words")]
    by_text = client.embeddings.create(model="all-minilm-l6-v2", input=["first text", "other words"])
    by_ids = client.embeddings.create(model="all-minilm-l6-v2", input=ids)
    one = client.embeddings.create(model="all-minilm-l6-v2", input=ids[1])
    for mine, theirs in zip(by_ids.data, by_text.data, strict=True):
        assert np.array(mine.embedding) @ np.array(theirs.embedding) >= 0.99999
    assert np.array(one.data[0].embedding) @ np.array(by_text.data[1].embedding) >= 0.99999


def test_an_input_longer_than_the_context_is_a_400(client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model="all-minilm-l6-v2", input=["fine", "word " * 400])
    assert raised.value.code == "context_length_exceeded" and "input[1]" in str(raised.value)


def test_dimensions_shorten_only_models_trained_for_it(client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model="all-minilm-l6-v2", input="a text", dimensions=64)
    assert "dimensions" in str(raised.value)
    full = np.array(client.embeddings.create(model="minilm-matryoshka", input="a text").data[0].embedding)
    short_answer = client.embeddings.create(model="minilm-matryoshka", input="a text", dimensions=64)
    short = np.array(short_answer.data[0].embedding)
    assert short.shape == (64,) and abs(np.linalg.norm(short) - 1.0) < 1e-5
    assert np.allclose(short, full[:64] / np.linalg.norm(full[:64]), atol=1e-6)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="minilm-matryoshka", input="a text", dimensions=4096)
