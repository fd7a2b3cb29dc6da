"""The fake engine's `fail_every`: an engine failing mid-request, as the load-and-fault test uses it."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient
from server_kit import build_app, error_of, wait_ready

CONFIG = {"models": [{"id": "flaky", "modality": "text_generation", "engine": "fake", "fake": {"fail_every": 2}}]}
ASK = {"model": "flaky", "messages": [{"role": "user", "content": "hello there"}]}


def _leases(client: TestClient[Any]) -> int:
    return sum(m["active_leases"] for m in client.get("/v1/memory/status").json()["models"])


def test_every_second_chat_fails_after_its_first_token_and_releases_the_model() -> None:
    with TestClient(build_app(CONFIG)) as client:
        wait_ready(client)
        assert client.post("/v1/chat/completions", json=ASK).status_code == 200
        failed = client.post("/v1/chat/completions", json=ASK)
        assert failed.status_code == 500
        assert error_of(failed)["type"] == "server_error"
        assert "`flaky` failed" in error_of(failed)["message"]  # the exception's text stays in the server log
        assert "fake engine failure" not in error_of(failed)["message"]
        assert client.post("/v1/chat/completions", json={**ASK, "stream": True}).status_code == 200
        stream = client.post("/v1/chat/completions", json={**ASK, "stream": True})
        assert stream.status_code == 200
        assert '"finish_reason":"error"' in stream.text
        assert _leases(client) == 0
