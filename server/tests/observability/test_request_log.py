"""The request log: every field, filters, levels off..trace, redaction, truncation, the ring buffer."""

from __future__ import annotations

import msgspec
import pytest
from hypnos.config import ConfigError
from hypnos.errors import HypnosError
from hypnos.types import EngineTiming
from hypnos_server.observability.facts import RequestFacts
from hypnos_server.observability.request_log import (
    MAX_PAYLOAD_CHARS,
    MAX_TEXT_CHARS,
    REDACTED,
    RequestLog,
)

ALL_FIELDS = {
    "id",
    "route",
    "method",
    "status",
    "key",
    "started_at",
    "duration_ms",
    "model",
    "stream",
    "tokens_in",
    "tokens_out",
    "cached_tokens",
    "tokens_per_s",
    "inference_ms",
    "tier_switch_ms",
    "previous_tier",
    "error",
    "level",
    "truncated",
}


def call(n: int = 0, **overrides: object) -> RequestFacts:
    fields: dict[str, object] = {
        "id": f"req-{n:032x}",
        "route": "/v1/chat/completions",
        "method": "POST",
        "status": 200,
        "started_unix": 1_700_000_000.5 + n,
        "duration_ms": 12.5,
        "key_label": "alice",
        "model": "tiny",
        "tokens_in": 5,
        "tokens_out": 8,
        "cached_tokens": 0,
        "inference_ms": 10.0,
        "tier_switch_ms": 0.0,
        "previous_tier": "tier1_gpu_vram",
        "engine": EngineTiming(decode_tokens_per_s=800.0, cached_tokens=0),
        "input_text": "user: my email is bob@example.com",
        "output_text": "hello bob@example.com",
        "request_body": b'{"model":"tiny","messages":[{"role":"user","content":"my email is bob@example.com"}]}',
        "response_body": b'{"choices":[]}',
    }
    fields.update(overrides)
    return RequestFacts(**fields)  # type: ignore[arg-type]


def as_dict(log: RequestLog, **filters: object) -> dict:
    return msgspec.to_builtins(log.query(**filters))  # type: ignore[arg-type]


def test_info_record_has_every_field_and_no_text() -> None:
    log = RequestLog()
    log.capture(call())
    page = as_dict(log)
    assert (page["level"], page["capacity"], page["stored"]) == ("info", 200, 1)
    record = page["records"][0]
    assert set(record) == ALL_FIELDS
    assert record["started_at"] == "2023-11-14T22:13:20.500Z"
    assert record["key"] == "alice"
    assert record["tokens_per_s"] == 800.0
    assert record["level"] == "info" and record["truncated"] is False and record["error"] is None


def test_tokens_per_s_is_derived_when_the_engine_gives_none() -> None:
    log = RequestLog()
    log.capture(call(engine=None, tokens_out=20, inference_ms=100.0, cached_tokens=None))
    record = as_dict(log)["records"][0]
    assert record["tokens_per_s"] == 200.0
    assert record["cached_tokens"] is None


def test_debug_adds_input_output_and_trace_adds_payloads() -> None:
    log = RequestLog(level="debug")
    log.capture(call(1))
    record = as_dict(log)["records"][0]
    assert record["input"] == "user: my email is bob@example.com"
    assert record["output"] == "hello bob@example.com"
    assert "request_payload" not in record and "response_payload" not in record
    log.set_level("trace")
    log.capture(call(2))
    record = as_dict(log)["records"][0]
    assert record["request_payload"].startswith('{"model":"tiny"')
    assert record["response_payload"] == '{"choices":[]}'
    assert set(record) == ALL_FIELDS | {"input", "output", "request_payload", "response_payload"}


def test_off_captures_nothing() -> None:
    log = RequestLog(level="off")
    assert log.capture(call()) is None
    assert log.capture(call(status=500, error_type="server_error")) is None
    assert log.stored == 0


@pytest.mark.parametrize(
    ("level", "captured"),
    [("error", {"5xx", "stream"}), ("warn", {"5xx", "stream", "4xx"}), ("info", {"5xx", "stream", "4xx", "ok"})],
)
def test_levels_select_by_severity(level: str, captured: set[str]) -> None:
    log = RequestLog(level=level)
    log.capture(call(1, id="ok"))
    log.capture(call(2, id="4xx", status=404, error_type="model_not_found", error_message="no such model"))
    log.capture(call(3, id="5xx", status=500, error_type="server_error", error_message="engine died"))
    log.capture(call(4, id="stream", status=200, error_message="the client went away"))
    assert {r.id for r in log.query().records} == captured


def test_severity_level_field() -> None:
    log = RequestLog()
    log.capture(call(1, status=404, error_type="model_not_found"))
    log.capture(call(2, status=503, error_type="model_not_available"))
    log.capture(call(3, status=200, error_message="failed mid-stream"))
    assert [r.level for r in log.query().records] == ["error", "error", "warn"]


def test_bad_level_is_400() -> None:
    log = RequestLog()
    with pytest.raises(HypnosError) as raised:
        log.set_level("verbose")
    assert raised.value.status == 400
    assert log.level == "info"


def test_filters() -> None:
    log = RequestLog()
    log.capture(call(1, id="a", model="tiny", key_label="alice"))
    log.capture(call(2, id="b", model="big", key_label="bob", route="/v1/embeddings"))
    log.capture(call(3, id="c", model="tiny", key_label="bob", status=429, error_type="rate_limit_error"))
    log.capture(call(4, id="d", model="tiny", key_label=None, status=500, error_type="server_error"))
    log.capture(call(5, id="e", model="tiny", status=200, error_message="stream failed"))

    def ids(**filters: object) -> list[str]:
        return [r.id for r in log.query(**filters).records]  # type: ignore[arg-type]

    assert ids() == ["e", "d", "c", "b", "a"]
    assert ids(model="big") == ["b"]
    assert ids(route="/v1/embeddings") == ["b"]
    assert ids(key="bob") == ["c", "b"]
    assert ids(status="ok") == ["b", "a"]
    assert ids(status="error") == ["e", "d", "c"]
    assert ids(status="4xx") == ["c"]
    assert ids(status="5xx") == ["d"]
    assert ids(limit=2) == ["e", "d"]
    assert ids(model="tiny", status="error", limit=1) == ["e"]
    assert log.query(model="nope").stored == 5


@pytest.mark.parametrize("filters", [{"status": "bad"}, {"limit": 0}, {"limit": -3}])
def test_bad_filters_are_400(filters: dict) -> None:
    with pytest.raises(HypnosError) as raised:
        RequestLog().query(**filters)
    assert raised.value.status == 400


def test_ring_buffer_keeps_the_newest() -> None:
    log = RequestLog(capacity=3)
    for n in range(5):
        log.capture(call(n, id=f"r{n}"))
    page = log.query()
    assert [r.id for r in page.records] == ["r4", "r3", "r2"]
    assert page.stored == 3 and page.capacity == 3
    assert log.get("r1") is None and log.get("r3") is not None


def test_one_keys_calls_never_push_another_keys_records_out() -> None:
    log = RequestLog(capacity=3)
    log.capture(call(0, id="audit", key_label="bob"))
    for n in range(1, 50):
        log.capture(call(n, id=f"cheap{n}", key_label="mallory"))
    assert log.get("audit", tenant="bob") is not None and log.get("audit") is not None
    assert [r.id for r in log.query(tenant="mallory").records] == ["cheap49", "cheap48", "cheap47"]
    assert [r.id for r in log.query().records] == ["cheap49", "cheap48", "cheap47", "audit"]  # newest first
    assert log.stored == 4


def test_zero_capacity_stores_nothing() -> None:
    log = RequestLog(capacity=0)
    assert log.capture(call()) is None
    assert log.query().records == []


def test_get_and_clear() -> None:
    log = RequestLog()
    log.capture(call(1, id="req-1"))
    assert log.get("req-1").id == "req-1"  # type: ignore[union-attr]
    assert log.get("req-2") is None
    log.clear()
    assert log.stored == 0 and log.get("req-1") is None


def test_polling_scrapes_and_probes_are_not_logged() -> None:
    log = RequestLog()
    for route in (
        "/v1/logs",
        "/v1/logs/{id}",
        "/v1/logs/level",
        "/metrics",
        "/health",
        "/ready",
        "/",
        "/playground/{name}",
    ):
        assert log.capture(call(route=route, method="GET")) is None
    for route in ("/v1/memory/status", "/v1/memory/kv-park"):  # the playground polls them every second
        assert log.capture(call(route=route, method="GET")) is None
    assert log.capture(call(route="/v1/memory/kv-park", method="POST")) is not None
    assert log.capture(call(route="/v1/models", method="GET")) is not None


def test_pattern_redaction_of_text_payloads_and_errors() -> None:
    log = RequestLog(level="trace", redact=[r"[\w.]+@[\w.]+", "secret-\\d+"])
    log.capture(call(1, error_message="bad key secret-42", status=400, error_type="invalid_request_error"))
    record = log.query().records[0]
    assert record.input == f"user: my email is {REDACTED}"
    assert record.output == f"hello {REDACTED}"
    assert "bob@example.com" not in record.request_payload  # type: ignore[operator]
    assert REDACTED in record.request_payload  # type: ignore[operator]
    assert record.error == f"bad key {REDACTED}"


@pytest.mark.parametrize("blank", ["", "*"])
def test_blank_pattern_blanks_captured_text(blank: str) -> None:
    log = RequestLog(level="trace", redact=[blank])
    log.capture(call(1, error_message="engine died", status=500, error_type="server_error"))
    record = log.query().records[0]
    assert record.input == record.output == record.request_payload == record.response_payload == REDACTED
    assert record.error == "engine died"
    assert record.model == "tiny" and record.tokens_in == 5


def test_invalid_redact_pattern_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"request_log_redact\[1\]"):
        RequestLog(redact=["ok", "(unclosed"])


def test_long_text_is_truncated_and_flagged() -> None:
    log = RequestLog(level="trace")
    long_input = "word " * MAX_TEXT_CHARS
    log.capture(call(1, input_text=long_input, request_body=b"x" * (MAX_PAYLOAD_CHARS * 10)))
    record = log.query().records[0]
    assert record.truncated is True
    assert len(record.input) == MAX_TEXT_CHARS  # type: ignore[arg-type]
    assert len(record.request_payload) == MAX_PAYLOAD_CHARS  # type: ignore[arg-type]
    log.capture(call(2))
    assert log.query().records[0].truncated is False


def test_truncation_keeps_a_split_utf8_character_readable() -> None:
    log = RequestLog(level="trace")
    body = ("é" * (MAX_PAYLOAD_CHARS * 3)).encode()
    log.capture(call(1, request_body=body))
    record = log.query().records[0]
    assert record.truncated and set(record.request_payload) == {"é"}  # type: ignore[arg-type]


def test_binary_payloads_are_summarised() -> None:
    log = RequestLog(level="trace")
    log.capture(call(1, request_body=b"RIFF\x00\x00\xff\xfe" * 10, response_body=None))
    record = log.query().records[0]
    assert record.request_payload == "<80 bytes, not text>"
    assert record.response_payload is msgspec.UNSET
