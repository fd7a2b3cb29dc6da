"""Engine hosts seen through the server: status and metrics name the host, a killed host drops its model to tier 3
with the reason, the next request starts a new one, a crash mid-stream ends the stream with the error chunk, and a
host that exits while loading or hangs mid-stream fails its request in the spec's shape."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from litestar.testing import TestClient
from server_kit import build_app, wait_ready

CONFIG: dict[str, Any] = {
    "server": {"isolation": "process"},
    "models": [
        {"id": "chat", "modality": "text_generation", "engine": "fake", "fake": {"tokens": 50, "layer_bytes": 1 << 20}},
        {
            "id": "crashy",
            "modality": "text_generation",
            "engine": "fake",
            "fake": {"tokens": 50, "crash_after_tokens": 3, "layer_bytes": 1 << 20},
        },
        {"id": "local", "modality": "text_generation", "engine": "fake", "isolation": "thread"},
        {"id": "exits", "modality": "text_generation", "engine": "fake", "fake": {"exit_on_load": True}},
        {
            "id": "hangs",
            "modality": "text_generation",
            "engine": "fake",
            "fake": {"tokens": 50, "hang_after_tokens": 2, "layer_bytes": 1 << 20},
            "process": {"hang_secs": 1.0},
        },
    ],
}
CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 10}


def _model(client: TestClient[Any], model_id: str) -> dict[str, Any]:
    models = client.get("/v1/memory/status").json()["models"]
    return next(model for model in models if model["id"] == model_id)


def test_status_and_metrics_show_the_host_and_a_killed_host_reloads() -> None:
    with TestClient(build_app(CONFIG)) as client:
        wait_ready(client)
        assert client.post("/v1/chat/completions", json={"model": "chat", **CHAT}).status_code == 200
        entry = _model(client, "chat")
        assert entry["isolation"] == "process" and entry["current_tier"] == "tier1_gpu_vram"
        process = entry["engine_process"]
        assert process["pid"] != os.getpid() and process["rss_bytes"] > 0 and process["restarts"] == 0
        assert entry["measured_bytes"] >= process["rss_bytes"] and entry["booked_bytes"] > 0
        local = _model(client, "local")
        assert local["isolation"] == "thread" and local["engine_process"] is None

        os.kill(process["pid"], signal.SIGKILL)
        for _ in range(200):
            entry = _model(client, "chat")
            if entry["current_tier"] == "tier3_nvme_ssd":
                break
            time.sleep(0.02)
        assert entry["current_tier"] == "tier3_nvme_ssd" and entry["engine_process"] is None
        assert "SIGKILL" in entry["unavailable_reason"]

        answer = client.post("/v1/chat/completions", json={"model": "chat", **CHAT})
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
        entry = _model(client, "chat")
        assert entry["engine_process"]["pid"] != process["pid"] and entry["engine_restarts"] == 1
        assert entry["unavailable_reason"] is None
        metrics = client.get("/metrics").text
        assert 'hypnos_engine_restarts_total{model="chat"} 1.0' in metrics
        assert 'hypnos_engine_host_rss_bytes{model="chat"}' in metrics


def test_a_crash_mid_stream_ends_with_the_error_chunk_and_a_whole_request_with_a_500() -> None:
    with TestClient(build_app(CONFIG)) as client:
        wait_ready(client)
        with client.stream("POST", "/v1/chat/completions", json={"model": "crashy", "stream": True, **CHAT}) as reply:
            assert reply.status_code == 200
            lines = [line for line in reply.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        last = json.loads(lines[-2][6:])
        assert last["choices"][0]["finish_reason"] == "error"
        whole = client.post("/v1/chat/completions", json={"model": "crashy", **CHAT})
        assert whole.status_code == 500
        assert whole.json()["error"]["type"] == "server_error" and "SIGKILL" in whole.json()["error"]["message"]
        assert client.post("/v1/chat/completions", json={"model": "chat", **CHAT}).status_code == 200


def test_a_host_that_exits_while_loading_answers_500_and_the_model_stays_in_tier3() -> None:
    with TestClient(build_app(CONFIG)) as client:
        wait_ready(client)
        answer = client.post("/v1/chat/completions", json={"model": "exits", **CHAT})
        assert answer.status_code == 500
        error = answer.json()["error"]
        assert error["type"] == "server_error" and "status 3" in error["message"]
        entry = _model(client, "exits")
        assert entry["current_tier"] == "tier3_nvme_ssd" and entry["engine_process"] is None
        assert entry["active_leases"] == 0 and "status 3" in entry["unavailable_reason"]
        assert client.post("/v1/chat/completions", json={"model": "chat", **CHAT}).status_code == 200


def test_a_hung_host_is_killed_and_its_stream_ends_with_the_error_chunk() -> None:
    with TestClient(build_app(CONFIG)) as client:
        wait_ready(client)
        with client.stream("POST", "/v1/chat/completions", json={"model": "hangs", "stream": True, **CHAT}) as reply:
            assert reply.status_code == 200
            lines = [line for line in reply.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        last = json.loads(lines[-2][6:])
        assert last["choices"][0]["finish_reason"] == "error" and "no progress" in last["error"]["message"]
        assert any(json.loads(line[6:])["choices"][0]["delta"].get("content") for line in lines[:-2])
        entry = _model(client, "hangs")
        assert entry["current_tier"] == "tier3_nvme_ssd" and entry["engine_process"] is None
        assert "hung" in entry["unavailable_reason"] and entry["active_leases"] == 0
