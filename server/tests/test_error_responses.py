"""Section 4: each error this server produces, with its exact status, type and body; never a traceback."""

from __future__ import annotations

import asyncio
import json

import pytest
from litestar.testing import TestClient
from server_harness import RawResponse, call, running
from server_kit import build_app, config, error_of, wait_ready

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def test_unknown_route_is_404_not_found(client):
    response = client.get("/v2/whatever")
    assert response.status_code == 404
    assert response.json() == {"error": {"message": "No route for GET /v2/whatever", "type": "not_found"}}


def test_wrong_method_is_405_json(client):
    response = client.get("/v1/chat/completions")
    assert response.status_code == 405
    assert error_of(response)["type"] == "invalid_request_error"


def test_malformed_json_is_400(client):
    response = client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert error_of(response)["type"] == "invalid_request_error"
    assert "not valid JSON" in error_of(response)["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": 5, **CHAT}, "`model`"),
        ({"messages": []}, "`model`"),
        ({"model": "fake-chat", "messages": [{"content": "x"}]}, "`messages[0].role`"),
        ({"model": "fake-chat", "messages": "hi"}, "`messages`"),
        ({"model": "fake-chat", "max_tokens": "many", **CHAT}, "`max_tokens`"),
    ],
)
def test_wrong_field_type_is_400_naming_the_field(client, body, field):
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert field in error_of(response)["message"]


def test_unknown_fields_are_ignored(client):
    response = client.post("/v1/chat/completions", json={"model": "fake-chat", "frequency_penalty": 1, "n": 3, **CHAT})
    assert response.status_code == 200


def test_unknown_model_is_404_model_not_found(client):
    response = client.post("/v1/chat/completions", json={"model": "nope", **CHAT})
    assert response.status_code == 404
    message = "The model `nope` does not exist (see GET /v1/models)."
    # `code` and `param` as OpenAI's: clients test `error.code == "model_not_found"`
    assert response.json() == {
        "error": {"message": message, "type": "model_not_found", "param": "model", "code": "model_not_found"}
    }


def test_disabled_model_is_404_model_disabled(client):
    response = client.post("/v1/chat/completions", json={"model": "fake-off", **CHAT})
    assert response.status_code == 404
    assert error_of(response)["type"] == "model_disabled"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "fake-embed", **CHAT}),
        ("/v1/embeddings", {"model": "fake-image", "input": "x"}),
        ("/v1/audio/speech", {"model": "fake-embed", "input": "x"}),
        ("/v1/images/generations", {"model": "fake-embed", "prompt": "x"}),
    ],
)
def test_modality_mismatch_is_400(client, path, body):
    response = client.post(path, json=body)
    assert response.status_code == 400
    assert error_of(response)["type"] == "invalid_request_error"
    assert "does not serve" in error_of(response)["message"]


def test_uninstalled_engine_is_503_model_not_available():
    raw = config(models=[{"id": "ghost", "modality": "text_generation", "engine": "not_installed"}])
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        response = client.post("/v1/chat/completions", json={"model": "ghost", **CHAT})
        assert response.status_code == 503
        assert error_of(response)["type"] == "model_not_available"
        assert "not_installed" in error_of(response)["message"]


def test_failed_load_is_500_server_error_without_traceback():
    raw = config(
        models=[{"id": "broken", "modality": "text_generation", "engine": "fake", "fake": {"fail_load": True}}]
    )
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        response = client.post("/v1/chat/completions", json={"model": "broken", **CHAT})
        assert response.status_code == 500
        assert error_of(response)["type"] == "server_error"
        assert "Traceback" not in response.text
        assert response.headers["x-request-id"].startswith("req-")


def test_after_a_failed_load_the_model_is_503_model_not_available_with_retry_after():
    raw = config(
        models=[{"id": "broken", "modality": "text_generation", "engine": "fake", "fake": {"fail_load": True}}]
    )
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        assert client.post("/v1/chat/completions", json={"model": "broken", **CHAT}).status_code == 500
        response = client.post("/v1/chat/completions", json={"model": "broken", **CHAT})
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        body = response.json()
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type"}
        assert body["error"]["type"] == "model_not_available"
        assert "fake load failure" in body["error"]["message"]
        status = client.get("/v1/memory/status").json()
        entry = next(m for m in status["models"] if m["id"] == "broken")
        assert "fake load failure" in entry["unavailable_reason"] and entry["load_failures"] == 1
        assert client.post("/v1/models/broken/enable").status_code == 200  # an admin's enable: the next one retries
        assert client.post("/v1/chat/completions", json={"model": "broken", **CHAT}).status_code == 500
        status = client.get("/v1/memory/status").json()
        assert next(m for m in status["models"] if m["id"] == "broken")["load_failures"] == 2


def test_unexpected_exception_is_500_without_traceback(client, monkeypatch):
    from hypnos.testing.fake_engine import FakeEngine

    async def explode(self, texts, cancel):
        raise RuntimeError("secret internals at /home/op/models")

    monkeypatch.setattr(FakeEngine, "embed", explode)
    response = client.post("/v1/embeddings", json={"model": "fake-embed", "input": "x"})
    assert response.status_code == 500
    assert error_of(response)["type"] == "server_error"
    assert "Traceback" not in response.text
    assert "secret internals" not in response.text and "RuntimeError" not in response.text  # logged, never echoed
    assert "x-request-id" in error_of(response)["message"]


async def test_full_queue_is_429_model_busy_without_retry_after():
    raw = config(
        models=[{"id": "busy", "modality": "text_generation", "engine": "fake", "fake": {"token_ms": 20}}],
        limits={"max_queue_per_model": 0},
    )
    app = build_app(raw)
    body = json.dumps({"model": "busy", "stream": True, **CHAT}).encode()
    headers = {"content-type": "application/json"}
    async with running(app):
        release = asyncio.Event()
        pending = RawResponse()
        first = asyncio.create_task(
            call(
                app,
                "POST",
                "/v1/chat/completions",
                body=body,
                headers=headers,
                hold_first_chunk=release,
                response=pending,
            )
        )
        await asyncio.wait_for(pending.first_chunk_reached.wait(), 10)
        refused = await call(app, "POST", "/v1/chat/completions", body=body, headers=headers)
        release.set()
        await first
    assert refused.status == 429
    assert json.loads(refused.body) == {
        "error": {"message": json.loads(refused.body)["error"]["message"], "type": "model_busy"}
    }
    assert "retry-after" not in refused.headers


def test_deadline_header_must_be_a_number(client):
    response = client.post(
        "/v1/chat/completions", json={"model": "fake-chat", **CHAT}, headers={"x-hypnos-deadline-ms": "soon"}
    )
    assert response.status_code == 400
