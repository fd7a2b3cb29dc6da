"""What a client sends is echoed bounded: errors, logs, the request log and the server's state never grow with it."""

from __future__ import annotations

import logging

from litestar.testing import TestClient
from server_kit import build_app, config, error_of, wait_ready

HUGE = "m" * 10_000_000
CHAT = {"messages": [{"role": "user", "content": "hello"}]}


def test_a_huge_model_id_is_not_echoed_whole(client, caplog):
    with caplog.at_level(logging.DEBUG):
        for path, body in [
            ("/v1/chat/completions", {"model": HUGE, **CHAT}),
            ("/v1/embeddings", {"model": HUGE, "input": "x"}),
            ("/v1/images/generations", {"model": HUGE, "prompt": "x"}),
            ("/v1/audio/speech", {"model": HUGE, "input": "x"}),
        ]:
            response = client.post(path, json=body)
            assert response.status_code == 404, path
            message = error_of(response)["message"]
            assert len(response.content) < 4096, path
            assert "m" * 256 + "…" in message
    assert len(caplog.text) < 200_000


def test_the_request_log_keeps_a_bounded_model_id():
    app = build_app(config(server={"request_log_level": "info"}))
    with TestClient(app) as client:
        wait_ready(client)
        client.post("/v1/chat/completions", json={"model": HUGE, **CHAT})
        records = client.get("/v1/logs", params={"route": "/v1/chat/completions"}).json()["records"]
    assert records and all(len(record["model"]) <= 257 for record in records)
    assert all(len(record.get("error") or "") <= 2049 for record in records)


def test_a_huge_unknown_path_or_log_id_is_not_echoed_whole(client):
    long = "x" * 50_000
    for method, path in [
        ("GET", f"/v1/{long}"),
        ("GET", f"/v1/logs/{long}"),
        ("GET", f"/playground/{long}.js"),
        ("POST", f"/v1/models/{long}/enable"),
    ]:
        response = client.request(method, path)
        assert response.status_code == 404, path[:40]
        assert len(response.content) < 4096


def test_any_error_message_is_capped():
    from hypnos.errors import HypnosError

    error = HypnosError(400, "invalid_request_error", "z" * 1_000_000)
    assert len(error.message) <= 2049 and error.message.endswith("…")
