"""End to end: the real `hypnos serve` process (granian) with the fake engine plugin, driven by the OpenAI SDK."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from hypnos_server.testing import live_server

API_KEY = "e2e-key"
CONFIG = """
[[models]]
id = "fake-chat"
modality = "text_generation"
engine = "fake"

[[models]]
id = "fake-embed"
modality = "embeddings"
engine = "fake"

[[models]]
id = "slow-chat"
modality = "text_generation"
engine = "fake"
[models.fake]
tokens = 400
token_ms = 20
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real server with the fake engine plugin (through its entry point) and an API key."""
    config = tmp_path_factory.mktemp("e2e") / "hypnos.toml"
    config.write_text(CONFIG)
    env = {"HYPNOS_API_KEYS": API_KEY, "HYPNOS_PLUGINS": "fake"}
    with live_server(config, env=env, ready_timeout=60, ready_path="/health") as base:
        yield base


@pytest.fixture
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0)


def test_health_body(server: str) -> None:
    body = httpx.get(f"{server}/health").json()
    assert body["status"] == "ok" and body["service"] == "hypnos"


def test_401_without_key(server: str) -> None:
    response = httpx.get(f"{server}/v1/models")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="hypnos"'
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert response.headers["x-request-id"].startswith("req-")


def test_sdk_wrong_key_raises_authentication_error(server: str) -> None:
    bad = openai.OpenAI(base_url=f"{server}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_models_list(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == ["fake-chat", "fake-embed", "slow-chat"]


def test_chat_completion(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="fake-chat", messages=[{"role": "user", "content": "Say something"}], max_tokens=4
    )
    assert completion.id.startswith("chatcmpl-")
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.completion_tokens == 4
    assert completion.choices[0].finish_reason == "length"
    assert "hypnos_telemetry" in (completion.model_extra or {})


def test_chat_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="fake-chat", messages=[{"role": "user", "content": "Stream please"}], stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert text.strip()
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_embeddings(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="fake-embed", input=["one", "two"])
    assert [item.index for item in result.data] == [0, 1]
    assert len(result.data[0].embedding) == 16


def test_sdk_sees_model_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="missing", input="x")


def _poll(client: openai.OpenAI, response_id: str, until: set[str]) -> openai.types.responses.Response:
    for _ in range(1000):
        response = client.responses.retrieve(response_id)
        if response.status in until:
            return response
        time.sleep(0.02)
    raise AssertionError(f"{response_id} never reached {until}")


def test_background_response_retrieved_until_completed_and_one_cancelled(client: openai.OpenAI) -> None:
    started = client.responses.create(model="fake-chat", input="in the background", background=True)
    assert started.status in ("queued", "in_progress") and started.background
    done = _poll(client, started.id, {"completed"})
    assert done.output_text and done.usage is not None and done.usage.output_tokens > 0
    slow = client.responses.create(model="slow-chat", input="take your time", background=True)
    _poll(client, slow.id, {"in_progress"})
    assert client.responses.cancel(slow.id).status == "cancelled"
    cancelled = _poll(client, slow.id, {"cancelled", "completed", "failed"})
    assert cancelled.status == "cancelled" and len(cancelled.output_text.split()) < 400
