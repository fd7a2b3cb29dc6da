"""Observability through the real app: /metrics after a chat, an error and a rate-limited call; the log routes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypnos.config import settings_from_mapping
from hypnos.plugins import make_plugin_manager
from hypnos.testing import fake_plugin
from hypnos_server.app import create_app
from hypnos_server.observability import observability_of
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families

ALICE = {"Authorization": "Bearer sk-alice"}
BOB = {"Authorization": "Bearer sk-bob"}
CHAT = "/v1/chat/completions"


def make_client(server: dict[str, Any] | None = None) -> TestClient[Any]:
    raw = {
        "server": {
            "keys": [
                {"key": "sk-alice", "label": "alice", "admin": True},  # an admin reads every key's records
                {"key": "sk-bob", "label": "bob", "requests_per_minute": 1},
            ],
            **(server or {}),
        },
        "models": [
            {"id": "fake-chat", "modality": "text_generation", "engine": "fake"},
            {"id": "fake-embed", "modality": "embeddings", "engine": "fake"},
            {"id": "fake-voice", "modality": "text_to_speech", "engine": "fake"},
        ],
    }
    app = create_app(settings_from_mapping(raw), make_plugin_manager(autoload=False, plugins=[fake_plugin]))
    return TestClient(app)


@pytest.fixture
def client() -> Iterator[TestClient[Any]]:
    with make_client() as test_client:
        for _ in range(500):
            if test_client.get("/ready").status_code == 200:
                break
            time.sleep(0.01)
        yield test_client


def chat(client: TestClient[Any], headers: dict[str, str], model: str = "fake-chat", **extra: Any) -> Any:
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}], **extra}
    return client.post(CHAT, json=body, headers=headers)


def scrape(client: TestClient[Any]) -> dict[str, Any]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def test_metrics_content_type_is_the_exposition_format_with_each_parameter_once(client: TestClient[Any]) -> None:
    # Go's mime.ParseMediaType (Prometheus 3) rejects a repeated parameter, and a scrape fails on an invalid one
    response = client.get("/metrics")
    assert response.headers.get_list("content-type") == ["text/plain; version=0.0.4; charset=utf-8"]


def sample(families: dict[str, Any], family: str, name: str, **labels: str) -> float:
    for item in families[family].samples:
        if item.name == name and item.labels == labels:
            return float(item.value)
    raise AssertionError(f"no {name}{labels}; have {[(s.name, s.labels) for s in families[family].samples]}")


def test_metrics_count_a_chat_an_error_and_a_rate_limited_call(client: TestClient[Any]) -> None:
    assert chat(client, ALICE).status_code == 200
    assert chat(client, ALICE, model="no-such-model").status_code == 404
    assert chat(client, BOB).status_code == 200
    limited = chat(client, BOB)
    assert limited.status_code == 429 and limited.json()["error"]["type"] == "rate_limit_error"

    families = scrape(client)
    requests = "hypnos_http_requests"
    assert sample(families, requests, "hypnos_http_requests_total", route=CHAT, **{"class": "2xx"}) == 2
    assert sample(families, requests, "hypnos_http_requests_total", route=CHAT, **{"class": "4xx"}) == 2
    keys = "hypnos_api_key_requests"
    assert sample(families, keys, "hypnos_api_key_requests_total", key="alice") == 2
    assert sample(families, keys, "hypnos_api_key_requests_total", key="bob") == 2
    rejections = "hypnos_api_key_rejections"
    assert sample(families, rejections, "hypnos_api_key_rejections_total", key="bob") == 1
    assert all(s.labels["key"] != "alice" for s in families[rejections].samples)
    assert sample(families, "hypnos_api_key_tokens", "hypnos_api_key_tokens_total", key="alice") > 0
    assert sample(families, "hypnos_request_e2e_ms", "hypnos_request_e2e_ms_count", route=CHAT) == 4
    assert sample(families, "hypnos_model_requests", "hypnos_model_requests_total", model="fake-chat") == 2
    assert sample(families, "hypnos_model_tier", "hypnos_model_tier", model="fake-chat") == 1
    assert sample(families, "hypnos_model_tier", "hypnos_model_tier", model="fake-embed") == 3
    labels = {s.labels.get("route") for f in families.values() for s in f.samples if "route" in s.labels}
    assert all(label.startswith("/") or label == "unmatched" for label in labels)
    assert "sk-alice" not in client.get("/metrics").text


def test_route_labels_are_templates_never_raw_paths(client: TestClient[Any]) -> None:
    for suffix in ("a", "b", "c"):
        assert client.get(f"/v1/logs/req-{suffix}", headers=ALICE).status_code == 404
    assert client.get("/v1/logs/req-x").status_code == 401  # refused before routing, still the template
    assert client.get("/v1/nothing-here", headers=ALICE).status_code == 404
    families = scrape(client)
    routes = {s.labels["route"] for s in families["hypnos_http_requests"].samples}
    assert "/v1/logs/{id}" in routes and "unmatched" in routes
    assert not any(route.startswith("/v1/logs/req-") or route == "/v1/nothing-here" for route in routes)
    assert (
        sample(
            families, "hypnos_http_requests", "hypnos_http_requests_total", route="/v1/logs/{id}", **{"class": "4xx"}
        )
        == 4
    )


def test_request_log_records_and_filters_over_http(client: TestClient[Any]) -> None:
    ok = chat(client, ALICE)
    chat(client, ALICE, model="no-such-model")
    chat(client, BOB)
    chat(client, BOB)
    page = client.get("/v1/logs", headers=ALICE).json()
    assert page["level"] == "info" and page["capacity"] == 200 and page["stored"] == 4
    assert [r["status"] for r in page["records"]] == [429, 200, 404, 200]
    first = page["records"][-1]
    assert first["id"] == ok.headers["x-request-id"]
    assert first["route"] == CHAT and first["key"] == "alice" and first["model"] == "fake-chat"
    assert first["tokens_in"] > 0 and first["tokens_out"] > 0 and first["started_at"].endswith("Z")

    def ids(query: str) -> list[int]:
        return [r["status"] for r in client.get(f"/v1/logs?{query}", headers=ALICE).json()["records"]]

    assert ids("status=ok") == [200, 200]
    assert ids("status=error") == [429, 404]
    assert ids("status=4xx") == [429, 404]
    assert ids("status=5xx") == []
    assert ids("key=bob") == [429, 200]
    assert ids("model=no-such-model") == [404]
    assert ids(f"route={CHAT}") == [429, 200, 404, 200]
    assert ids("route=/v1/embeddings") == []
    assert ids("limit=1") == [429]
    assert client.get("/v1/logs?status=weird", headers=ALICE).status_code == 400
    assert client.get("/v1/logs?limit=x", headers=ALICE).status_code == 400
    assert client.get("/v1/logs?limit=0", headers=ALICE).status_code == 400
    # polling the log is never logged
    assert client.get("/v1/logs", headers=ALICE).json()["stored"] == 4

    one = client.get(f"/v1/logs/{ok.headers['x-request-id']}", headers=ALICE)
    assert one.status_code == 200 and one.json()["id"] == ok.headers["x-request-id"]
    missing = client.get("/v1/logs/req-nope", headers=ALICE)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"

    cleared = client.delete("/v1/logs", headers=ALICE)
    assert cleared.status_code == 200 and cleared.json() == {"cleared": True}
    assert client.get("/v1/logs", headers=ALICE).json()["stored"] == 0


def test_log_level_route(client: TestClient[Any]) -> None:
    assert client.post("/v1/logs/level", json={"level": "trace"}, headers=ALICE).json() == {"level": "trace"}
    bad = client.post("/v1/logs/level", json={"level": "loud"}, headers=ALICE)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert client.post("/v1/logs/level", content=b"nope", headers=ALICE).status_code == 400
    assert client.post("/v1/logs/level", json={"level": "off"}, headers=ALICE).json() == {"level": "off"}
    chat(client, ALICE)
    assert client.get("/v1/logs", headers=ALICE).json()["stored"] == 0


def test_logs_need_a_key_and_metrics_stay_open(client: TestClient[Any]) -> None:
    assert client.get("/v1/logs").status_code == 401
    assert client.get("/metrics").status_code == 200


def test_metrics_can_require_a_key() -> None:
    with make_client({"metrics_require_auth": True}) as closed:
        assert closed.get("/metrics").status_code == 401
        assert closed.get("/metrics", headers=ALICE).status_code == 200


def test_workflow_latency_reaches_the_status_and_metrics(client: TestClient[Any]) -> None:
    flow = {**ALICE, "x-hypnos-workflow": "voice/turn-1"}
    chat(client, flow)
    client.post("/v1/embeddings", json={"model": "fake-embed", "input": "hi"}, headers=flow)
    chat(client, {**flow, "x-hypnos-workflow-end": "true"})
    state = client.app.state.hypnos
    obs = observability_of(state)
    assert obs is not None
    latency = obs.latency()
    assert latency["workflows"]["voice"]["count"] == 1
    assert latency["routes"][CHAT]["count"] == 2
    assert set(latency["routes"][CHAT]) == {"p50", "p95", "p99", "count"}
    families = scrape(client)
    assert sample(families, "hypnos_workflow_e2e_ms", "hypnos_workflow_e2e_ms_count", workflow="voice") == 1
    status = client.get("/v1/memory/status", headers=ALICE).json()
    assert status["latency"]["workflows"]["voice"]["count"] == 1
    assert status["latency"]["routes"][CHAT] == latency["routes"][CHAT]


def test_debug_captures_the_exchange_and_redaction_applies() -> None:
    with make_client({"request_log_level": "debug", "request_log_redact": [r"secret-\d+"]}) as client:
        for _ in range(500):
            if client.get("/ready").status_code == 200:
                break
            time.sleep(0.01)
        body = {"model": "fake-chat", "messages": [{"role": "user", "content": "my code is secret-42"}]}
        answer = client.post(CHAT, json=body, headers=ALICE).json()
        streamed = client.post(CHAT, json={**body, "stream": True}, headers=ALICE)
        assert streamed.status_code == 200
        records = client.get("/v1/logs", headers=ALICE).json()["records"]
        assert [r["stream"] for r in records] == [True, False]
        for record in records:
            assert record["input"] == "user: my code is [redacted]"
            assert record["output"] == answer["choices"][0]["message"]["content"]
            assert "request_payload" not in record
        families = scrape(client)
        assert sample(families, "hypnos_prefix_cache_misses", "hypnos_prefix_cache_misses_total") == 2
        assert sample(families, "hypnos_chat_decode_tokens_per_s", "hypnos_chat_decode_tokens_per_s_count") >= 0


def test_trace_captures_payloads(client: TestClient[Any]) -> None:
    chat(client, ALICE)
    assert "request_payload" not in client.get("/v1/logs", headers=ALICE).json()["records"][0]
    client.post("/v1/logs/level", json={"level": "trace"}, headers=ALICE)
    answer = chat(client, ALICE)
    big = client.post("/v1/embeddings", json={"model": "fake-embed", "input": "word " * 60_000}, headers=ALICE)
    assert big.status_code == 200
    embed, record = client.get("/v1/logs", headers=ALICE).json()["records"][:2]
    assert record["request_payload"].startswith('{"model":"fake-chat"')
    assert record["response_payload"] == answer.text
    assert record["truncated"] is False and "input" in record and "output" in record
    assert embed["truncated"] is True


def test_speech_feeds_the_tts_families(client: TestClient[Any]) -> None:
    body = {"model": "fake-voice", "input": "Hello there. How are you?"}
    assert client.post("/v1/audio/speech", json=body, headers=ALICE).status_code == 200
    assert client.post("/v1/audio/speech", json={**body, "stream": True}, headers=ALICE).status_code == 200
    families = scrape(client)
    assert sample(families, "hypnos_tts_rtf", "hypnos_tts_rtf_count") == 2
    assert sample(families, "hypnos_tts_ttfa_ms", "hypnos_tts_ttfa_ms_count") == 1
    assert sample(families, "hypnos_model_tier", "hypnos_model_tier", model="fake-voice") == 1
