"""Lifecycle (section 3): the port answers during staging, /ready flips, inference waits with 503 + Retry-After."""

from __future__ import annotations

import pytest
from hypnos_server.app import app_factory
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

STAGING_MESSAGE = "Hypnos is still pre-staging its startup models; retry shortly (GET /ready reports when it is done)"
STAGED = [
    {
        "id": "staged",
        "modality": "text_generation",
        "engine": "fake",
        "initial_tier": "tier1_gpu_vram",
        "modalities": ["embeddings", "text_to_speech", "speech_to_text", "image_generation"],
        "fake": {"load_ms": 1500},
    },
]
BLOCKED = [
    ("POST", "/v1/chat/completions", {"model": "staged", "messages": [{"role": "user", "content": "x"}]}),
    ("POST", "/v1/embeddings", {"model": "staged", "input": "x"}),
    ("POST", "/v1/audio/speech", {"model": "staged", "input": "x"}),
    ("POST", "/v1/audio/transcriptions", {"model": "staged", "audio_bytes": [1, 2]}),
    ("POST", "/v1/images/generations", {"model": "staged", "prompt": "x"}),
    ("POST", "/v1/memory/tier", {"model": "staged", "target_tier": "tier2_pinned_ram"}),
    ("POST", "/v1/models/staged/disable", None),
]


def test_staging_window_then_ready():
    app = build_app(config(models=STAGED))
    with TestClient(app) as client:
        health = client.get("/health")
        assert health.status_code == 200
        body = health.json()
        assert (body["status"], body["service"]) == ("ok", "hypnos")
        assert isinstance(body["version"], str) and isinstance(body["uptime_secs"], int)

        ready = client.get("/ready")
        assert ready.status_code == 503
        assert ready.json() == {"ready": False, "reason": "startup tier initialization in progress"}

        for method, path, payload in BLOCKED:
            response = client.request(method, path, json=payload)
            assert response.status_code == 503, path
            assert response.json() == {"error": {"message": STAGING_MESSAGE, "type": "model_not_available"}}
            assert response.headers["retry-after"] == "5"

        assert client.get("/v1/models").status_code == 200
        assert client.get("/v1/memory/status").status_code == 200

        wait_ready(client)
        assert client.get("/ready").json() == {"ready": True}
        chat = client.post("/v1/chat/completions", json=BLOCKED[0][2])
        assert chat.status_code == 200
        assert chat.json()["hypnos_telemetry"]["previous_tier"] == "tier1_gpu_vram"

        app.state.hypnos.scheduler.stop_admitting()  # what SIGTERM does first
        stopping = client.get("/ready")
        assert stopping.status_code == 503 and stopping.json() == {"ready": False, "reason": "shutting down"}
        refused = client.post("/v1/chat/completions", json=BLOCKED[0][2])
        assert refused.status_code == 503 and refused.json()["error"]["type"] == "model_not_available"
        assert "shutting down" in refused.json()["error"]["message"] and refused.headers["retry-after"] == "5"
    assert str(app.state.hypnos.scheduler.get("staged").tier) == "tier3_nvme_ssd"


def test_app_factory_reads_hypnos_config(tmp_path, monkeypatch):
    path = tmp_path / "hypnos.toml"
    path.write_text('[server]\napi_keys = ["k"]\n\n[[models]]\nid = "m"\nmodality = "embeddings"\nengine = "fake"\n')
    monkeypatch.setenv("HYPNOS_CONFIG", str(path))
    monkeypatch.setenv("HYPNOS_PLUGINS", "fake")
    app = app_factory()
    assert [m.id for m in app.state.hypnos.scheduler.models()] == ["m"]
    assert app.state.hypnos.keys.enabled


@pytest.mark.parametrize("path", ["/v1/models", "/v1/memory/status"])
def test_open_routes_answer_before_ready(path):
    with TestClient(build_app(config(models=STAGED))) as client:
        assert client.get(path).status_code == 200
