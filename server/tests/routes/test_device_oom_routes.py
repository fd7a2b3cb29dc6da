"""507 device_out_of_memory over HTTP: an engine library's own OOM error evicts the idle models and retries once,
for a streamed chat too (before its first event: nothing was sent yet); twice is the spec's 507."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar.testing import TestClient
from server_kit import build_app, error_of, wait_ready

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def app_config(ooms: int) -> dict[str, Any]:
    """An idle embeddings model, and a chat model whose library runs out of device memory `ooms` times."""
    small = {"layers": 1, "layer_bytes": 1 << 20, "non_layer_bytes": 0, "workspace_bytes": 0}
    return {
        "models": [
            {"id": "idle", "modality": "embeddings", "engine": "fake", "fake": small},
            {"id": "chat", "modality": "text_generation", "engine": "fake", "fake": {**small, "library_oom": ooms}},
        ]
    }


def stream_events(response: Any) -> list[dict[str, Any]]:
    """The JSON data of an SSE body (without [DONE])."""
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_library_oom_is_retried_after_evicting_the_idle_models(stream: bool) -> None:
    with TestClient(build_app(app_config(1))) as client:
        wait_ready(client)
        assert client.post("/v1/embeddings", json={"model": "idle", "input": "x"}).status_code == 200
        response = client.post("/v1/chat/completions", json={"model": "chat", "stream": stream, **CHAT})
        assert response.status_code == 200
        last = stream_events(response)[-1] if stream else response.json()
        assert last["hypnos_telemetry"]["evicted_models"] == ["idle"]
        evictions = client.get("/v1/memory/status").json()["recent_evictions"]
        assert [e["reason"] for e in evictions] == ["device_out_of_memory"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_library_oom_again_after_the_evictions_is_507(stream: bool) -> None:
    with TestClient(build_app(app_config(2))) as client:
        wait_ready(client)
        response = client.post("/v1/chat/completions", json={"model": "chat", "stream": stream, **CHAT})
        assert response.status_code == 507 and error_of(response)["type"] == "device_out_of_memory"


def test_a_streamed_message_is_retried_after_evicting_the_idle_models() -> None:
    # Anthropic Messages (like Responses and realtime) streams through ChatRun.events
    with TestClient(build_app(app_config(1))) as client:
        wait_ready(client)
        assert client.post("/v1/embeddings", json={"model": "idle", "input": "x"}).status_code == 200
        body = {"model": "chat", "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "hello"}]}
        response = client.post("/v1/messages", json=body)
        assert response.status_code == 200 and "message_stop" in response.text
        evictions = client.get("/v1/memory/status").json()["recent_evictions"]
        assert [e["reason"] for e in evictions] == ["device_out_of_memory"]
