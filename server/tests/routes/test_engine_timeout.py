"""504 timeout (section 4): an engine call that outlasts limits.engine_timeout_secs while its client still waits."""

from __future__ import annotations

from typing import Any

import pytest
from hypnos.config import ConfigError, settings_from_mapping
from litestar.testing import TestClient
from server_kit import build_app, error_of, wait_ready

SLOW = {"steps": 200, "token_ms": 50.0, "tokens": 200}  # ten seconds of work, cancellable at every step or token
CONFIG: dict[str, Any] = {
    "limits": {"engine_timeout_secs": 0.3},
    "models": [
        {"id": "slow-embed", "modality": "embeddings", "engine": "fake", "fake": SLOW},
        {"id": "slow-chat", "modality": "text_generation", "engine": "fake", "fake": SLOW},
        {"id": "quick-chat", "modality": "text_generation", "engine": "fake"},
    ],
}


def status_of(client: TestClient[Any], model: str) -> dict[str, Any]:
    return next(m for m in client.get("/v1/memory/status").json()["models"] if m["id"] == model)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", {"model": "slow-embed", "input": "hello"}),
        ("/v1/chat/completions", {"model": "slow-chat", "messages": [{"role": "user", "content": "hi"}]}),
    ],
)
def test_an_engine_call_past_its_bound_is_504_timeout_and_frees_the_model(path: str, body: dict[str, Any]) -> None:
    with TestClient(build_app(CONFIG)) as client:
        wait_ready(client)
        response = client.post(path, json=body)
        assert response.status_code == 504
        error = error_of(response)
        assert error["type"] == "timeout"
        assert "engine_timeout_secs" in error["message"] and body["model"] in error["message"]
        assert status_of(client, body["model"])["active_leases"] == 0
        record = client.get("/v1/logs").json()["records"][0]
        assert (record["status"], record["model"]) == (504, body["model"])
        # the bound is per engine call: a quick model answers as before
        quick = {"model": "quick-chat", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/v1/chat/completions", json=quick).status_code == 200


def test_no_bound_when_it_is_zero() -> None:
    raw = {**CONFIG, "limits": {"engine_timeout_secs": 0}}
    raw["models"] = [
        {"id": "slow-embed", "modality": "embeddings", "engine": "fake", "fake": {"steps": 10, "token_ms": 50.0}}
    ]
    with TestClient(build_app(raw)) as client:
        wait_ready(client)
        assert client.post("/v1/embeddings", json={"model": "slow-embed", "input": "hello"}).status_code == 200


def test_a_negative_bound_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="engine_timeout_secs"):
        settings_from_mapping({"limits": {"engine_timeout_secs": -1}})
