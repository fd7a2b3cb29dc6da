"""Body limit (413) and request timeout (408), both plain text; multipart uploads get the JSON error."""

from __future__ import annotations

from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

SLOW_LOAD = [{"id": "slow", "modality": "text_generation", "engine": "fake", "fake": {"load_ms": 3000}}]


def test_body_above_the_limit_is_413_plain_text():
    with TestClient(build_app(config(limits={"max_body_bytes": 100}))) as client:
        wait_ready(client)
        response = client.post("/v1/chat/completions", content=b"x" * 500, headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert response.headers["content-type"].startswith("text/plain")
        assert "max_body_bytes" in response.text
        assert response.headers["x-request-id"].startswith("req-")


def test_streamed_body_without_length_is_counted():
    with TestClient(build_app(config(limits={"max_body_bytes": 100}))) as client:
        wait_ready(client)

        def chunks():
            for _ in range(10):
                yield b"x" * 50

        response = client.post("/v1/embeddings", content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert response.headers["content-type"].startswith("text/plain")


def test_multipart_above_the_limit_is_json_payload_too_large():
    with TestClient(build_app(config(limits={"max_body_bytes": 100}))) as client:
        wait_ready(client)
        response = client.post(
            "/v1/audio/transcriptions", files={"file": ("a.wav", b"x" * 500)}, data={"model": "fake-chat"}
        )
        assert response.status_code == 413
        error = response.json()["error"]
        assert error["type"] == "payload_too_large"
        assert "max_body_bytes" in error["message"]


def test_no_headers_within_the_timeout_is_408_plain_text():
    raw = config(models=SLOW_LOAD, limits={"request_timeout_secs": 0.2})
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        body = {"model": "slow", "messages": [{"role": "user", "content": "hi"}]}
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 408
        assert response.headers["content-type"].startswith("text/plain")
        assert "request_timeout_secs" in response.text
        assert response.headers["x-request-id"].startswith("req-")
        # the model was released: the scheduler holds no lease for it
        assert client.app.state.hypnos.scheduler.get("slow").active_leases == 0


def test_a_stream_outlives_the_timeout_once_headers_are_out():
    slow_tokens = [{"id": "slowtok", "modality": "text_generation", "engine": "fake", "fake": {"token_ms": 60}}]
    raw = config(models=slow_tokens, limits={"request_timeout_secs": 0.3})
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        body = {"model": "slowtok", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200
        assert response.text.endswith("data: [DONE]\n\n")
        assert '"finish_reason":"stop"' in response.text
