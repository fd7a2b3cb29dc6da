"""The pipeline: a request id on every response, and one finalized record per request handed to observers."""

from __future__ import annotations

import re

from litestar.testing import TestClient
from server_kit import build_app, wait_ready

REQUEST_ID = re.compile(r"^req-[0-9a-f]{32}$")


def test_every_response_carries_a_request_id(client):
    responses = [
        client.get("/health"),
        client.get("/nowhere"),
        client.put("/v1/chat/completions"),
        client.post("/v1/chat/completions", content=b"{"),
        client.options("/v1/models", headers={"Origin": "http://localhost", "Access-Control-Request-Method": "GET"}),
    ]
    ids = [response.headers["x-request-id"] for response in responses]
    assert all(REQUEST_ID.match(value) for value in ids)
    assert len(set(ids)) == len(ids)


def test_observers_get_one_finished_record_per_request():
    app = build_app()
    records = []
    app.state.hypnos.observers.append(records.append)
    with TestClient(app) as client:
        wait_ready(client)
        records.clear()
        response = client.post(
            "/v1/chat/completions",
            json={"model": "fake-chat", "messages": [{"role": "user", "content": "one two three"}]},
            headers={"x-hypnos-workflow": "voice/1"},
        )
        client.get("/nowhere")
    chat, missing = records[0], records[1]
    assert chat.id == response.headers["x-request-id"]
    assert (chat.route, chat.status, chat.model, chat.stream) == ("/v1/chat/completions", 200, "fake-chat", False)
    assert chat.tokens_in == 3 and chat.tokens_out == response.json()["usage"]["completion_tokens"]
    assert chat.inference_ms is not None and chat.previous_tier == "tier3_nvme_ssd"
    assert chat.workflow == "voice/1"
    assert (missing.status, missing.error_type) == (404, "not_found")


def test_stream_record_is_finalized_after_the_stream():
    app = build_app()
    records = []
    app.state.hypnos.observers.append(records.append)
    with TestClient(app) as client:
        wait_ready(client)
        records.clear()
        client.post(
            "/v1/chat/completions",
            json={"model": "fake-chat", "stream": True, "messages": [{"role": "user", "content": "a b"}]},
        )
    (record,) = records
    assert record.stream and record.tokens_out > 0 and record.error is None


def test_a_failing_observer_does_not_break_requests():
    app = build_app()

    def broken(record):
        raise RuntimeError("observer bug")

    app.state.hypnos.observers.append(broken)
    with TestClient(app) as client:
        assert client.get("/health").status_code == 200
