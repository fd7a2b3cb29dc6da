"""The observer: one record adapted once and fed to histograms, workflows, metrics and the log."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from hypnos.config import Settings, settings_from_mapping
from hypnos.types import EngineTiming
from hypnos_server.observability.facts import UNMATCHED_ROUTE, facts_from_record, route_label
from hypnos_server.observability.hub import Observability


def record(**overrides: object) -> SimpleNamespace:
    """Shaped like the server's RequestRecord."""
    fields: dict[str, object] = {
        "id": "req-" + "a" * 32,
        "method": "POST",
        "path": "/v1/chat/completions",
        "started_at": 1_700_000_000.0,
        "route": "/v1/chat/completions",
        "status": 200,
        "duration_ms": 42.0,
        "key": "alice",
        "model": "tiny",
        "stream": True,
        "tokens_in": 3,
        "tokens_out": 8,
        "cached_tokens": 0,
        "inference_ms": 40.0,
        "tier_switch_ms": 0.0,
        "previous_tier": "tier1_gpu_vram",
        "error": None,
        "error_type": None,
        "workflow": None,
        "workflow_end": False,
    }
    fields.update(overrides)
    return SimpleNamespace(**fields)


def test_route_labels_are_templates() -> None:
    assert route_label("/v1/logs/{id:str}") == "/v1/logs/{id}"
    assert route_label("/v1/models/{model_id:path}/enable") == "/v1/models/{model_id}/enable"
    assert route_label(None) == UNMATCHED_ROUTE


def test_facts_from_a_request_record() -> None:
    facts = facts_from_record(record(route="/v1/logs/{id:str}", error="boom", error_type="server_error", status=500))
    assert facts.route == "/v1/logs/{id}"
    assert facts.key_label == "alice"
    assert facts.started_unix == 1_700_000_000.0
    assert facts.error_message == "boom" and facts.error_type == "server_error"
    assert facts.failed and facts.status_class == "5xx"


def test_facts_read_a_telemetry_object_when_present() -> None:
    telemetry = SimpleNamespace(
        engine=EngineTiming(ttft_ms=5.0),
        previous_tier="tier2_pinned_ram",
        inference_latency_ms=9.0,
        tier_switch_latency_ms=300.0,
        evicted_models=["x"],
    )
    facts = facts_from_record(record(telemetry=telemetry, inference_ms=None, tier_switch_ms=None, previous_tier=None))
    assert facts.engine is not None and facts.engine.ttft_ms == 5.0
    assert facts.previous_tier == "tier2_pinned_ram"
    assert (facts.inference_ms, facts.tier_switch_ms, facts.evicted_models) == (9.0, 300.0, ["x"])


def test_observe_feeds_everything_and_latency_has_the_status_shape() -> None:
    obs = Observability(Settings())
    now = time.time()
    obs.observe(record(workflow="voice/1", started_at=now))
    obs.observe(record(workflow="voice/1", started_at=now + 0.1, workflow_end=True))
    latency = obs.latency()
    assert latency["routes"]["/v1/chat/completions"] == {"p50": 42.0, "p95": 42.0, "p99": 42.0, "count": 2}
    assert latency["workflows"]["voice"]["count"] == 1
    assert latency["workflows"]["voice"]["p50"] == pytest.approx(142.0, rel=0.05)  # first start to last byte
    assert obs.log.stored == 2
    assert obs.metrics.http_requests.value("/v1/chat/completions", "2xx") == 2


def test_settings_reach_the_log_and_workflows() -> None:
    settings = settings_from_mapping(
        {
            "server": {
                "request_log_capacity": 5,
                "request_log_level": "debug",
                "request_log_redact": ["*"],
                "workflow_idle_secs": 2.5,
            }
        }
    )
    obs = Observability(settings)
    assert (obs.log.capacity, obs.log.level, obs.log.redactor.blank) == (5, "debug", True)
    assert obs.workflows.idle_secs == 2.5


def test_facts_from_the_servers_request_record() -> None:
    from hypnos_server.state import RequestRecord

    telemetry = SimpleNamespace(engine=EngineTiming(ttft_ms=5.0), evicted_models=["x"])
    raw = RequestRecord(
        id="req-1",
        method="GET",
        path="/v1/logs/req-9",
        started_at=1_700_000_000.0,
        status=401,
        key="bob",
        error="Missing API key",
        error_type="invalid_request_error",
        telemetry=telemetry,
        input_text="in",
        request_payload=b"{}",
    )
    facts = facts_from_record(raw, lambda path: "/v1/logs/{id:str}" if path.startswith("/v1/logs/") else None)
    assert facts.route == "/v1/logs/{id}" and facts.key_label == "bob" and facts.status_class == "4xx"
    assert facts.error_message == "Missing API key" and facts.engine is not None and facts.evicted_models == ["x"]
    assert (facts.input_text, facts.request_body) == ("in", b"{}")
    assert facts_from_record(RequestRecord(id="r", method="GET", path="/x", started_at=0.0)).route == UNMATCHED_ROUTE
