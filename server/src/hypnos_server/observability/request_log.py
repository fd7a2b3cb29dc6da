"""The request log of spec section 15: a ring buffer of recent calls per key, capture levels, filters, redaction."""

from __future__ import annotations

import codecs
import itertools
import re
import threading
from collections import deque
from datetime import UTC, datetime
from types import MappingProxyType

import msgspec
from hypnos.config import ConfigError
from hypnos.errors import invalid_request

from hypnos_server.observability.facts import RequestFacts

LEVELS = ("off", "error", "warn", "info", "debug", "trace")
_RANK = MappingProxyType({name: rank for rank, name in enumerate(LEVELS)})
STATUS_FILTERS = ("ok", "error", "4xx", "5xx")

REDACTED = "[redacted]"
BLANK_PATTERNS = frozenset({"", "*"})
MAX_TEXT_CHARS = 16 * 1024  # input / output
MAX_PAYLOAD_CHARS = 64 * 1024  # request_payload / response_payload

# Routes whose calls are never logged: polling the log itself, scrapes and probes.
UNLOGGED_ROUTES = ("/v1/logs", "/metrics", "/health", "/ready", "/playground/")
UNLOGGED_EXACT = frozenset({"/"})  # the playground page
POLLED_ROUTES = frozenset({"/v1/memory/status", "/v1/memory/kv-park"})  # GETs the playground polls every second


def _unlogged(facts: RequestFacts) -> bool:
    """The log's own routes, probes, scrapes, the playground's files and its status polling are not logged."""
    route = facts.route
    if route.startswith(UNLOGGED_ROUTES) or route in UNLOGGED_EXACT:
        return True
    return facts.method == "GET" and route in POLLED_ROUTES


class LogRecord(msgspec.Struct, kw_only=True):
    """One request log entry; input/output appear at debug and trace, the payloads at trace only."""

    id: str
    route: str
    method: str
    status: int
    key: str | None
    started_at: str
    duration_ms: float
    model: str | None
    stream: bool
    tokens_in: int | None
    tokens_out: int | None
    cached_tokens: int | None
    tokens_per_s: float | None
    inference_ms: float | None
    tier_switch_ms: float | None
    previous_tier: str | None
    error: str | None
    level: str
    truncated: bool
    stages_ms: dict[str, float] | msgspec.UnsetType = msgspec.UNSET  # a realtime response's stage timings
    batch: str | msgspec.UnsetType = msgspec.UNSET  # a batch line's `<batch id>/<custom_id>`
    input: str | msgspec.UnsetType = msgspec.UNSET
    output: str | msgspec.UnsetType = msgspec.UNSET
    request_payload: str | msgspec.UnsetType = msgspec.UNSET
    response_payload: str | msgspec.UnsetType = msgspec.UNSET


class LogPage(msgspec.Struct, kw_only=True):
    """The body of GET /v1/logs."""

    level: str
    capacity: int
    stored: int
    records: list[LogRecord]


class Redactor:
    """Applies server.request_log_redact: each regex match becomes [redacted]; "" or "*" blanks captured text."""

    def __init__(self, patterns: list[str]) -> None:
        self.blank = any(p in BLANK_PATTERNS for p in patterns)
        self.patterns: list[re.Pattern[str]] = []
        for index, pattern in enumerate(patterns):
            if pattern in BLANK_PATTERNS:
                continue
            try:
                self.patterns.append(re.compile(pattern))
            except re.error as error:
                message = f"`server.request_log_redact[{index}]`: not a valid regular expression ({error})"
                raise ConfigError(message) from None

    def text(self, value: str) -> str:
        """Captured text (input, output, payloads) after redaction: blanked or pattern-redacted."""
        if self.blank:
            return REDACTED if value else value
        return self.message(value)

    def message(self, value: str) -> str:
        """An error message after pattern redaction (never blanked: it is the server's own text)."""
        for pattern in self.patterns:
            value = pattern.sub(REDACTED, value)
        return value


def _rfc3339(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _severity(facts: RequestFacts) -> str:
    """error for 5xx and failures after the headers, warn for 4xx, info otherwise."""
    if facts.status >= 500 or (facts.status < 400 and facts.failed):
        return "error"
    if facts.status >= 400:
        return "warn"
    return "info"


def _payload_text(body: bytes | str | None, limit: int) -> tuple[str | None, bool]:
    """A payload as text and whether it was cut; binary bodies (audio, images) are summarised by size."""
    if body is None or isinstance(body, str):
        return body, False
    head = body[: limit * 4]
    try:  # an incremental decoder tolerates a character split by the cut
        text: str | None = codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) == len(body))
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        return f"<{len(body)} bytes, not text>", False
    return text, len(head) < len(body)


class RequestLog:
    """A bounded, newest-first log of recent calls at a changeable capture level: a ring of `capacity` records per
    key (and one for calls without a key), so one key's calls never push another key's records out."""

    def __init__(self, capacity: int = 200, level: str = "info", redact: list[str] | None = None) -> None:
        self.capacity = max(0, capacity)
        self.level = check_level(level)
        self.redactor = Redactor(list(redact or []))
        self._rings: dict[str | None, deque[tuple[int, LogRecord]]] = {}
        self._sequence = itertools.count()
        self._lock = threading.Lock()

    def _records(self, tenant: str | None = None) -> list[LogRecord]:
        """The stored records, oldest first: one key's (`tenant`), else every key's (call with the lock held)."""
        if tenant is not None:
            return [record for _, record in self._rings.get(tenant, ())]
        merged = sorted(itertools.chain.from_iterable(self._rings.values()), key=lambda entry: entry[0])
        return [record for _, record in merged]

    def set_level(self, level: str) -> str:
        """Change what the next calls capture; 400 on an unknown level."""
        self.level = check_level(level)
        return self.level

    def clear(self) -> None:
        """Drop every stored record."""
        with self._lock:
            self._rings.clear()

    @property
    def stored(self) -> int:
        """How many records are stored (every key's)."""
        with self._lock:
            return sum(len(ring) for ring in self._rings.values())

    def capture(self, facts: RequestFacts) -> LogRecord | None:
        """Store a record for a finished call when the level asks for it (never for the log's own routes)."""
        if self.capacity == 0 or self.level == "off" or _unlogged(facts):
            return None
        severity = _severity(facts)
        if _RANK[severity] > _RANK[self.level]:
            return None
        record = self._build(facts, severity)
        with self._lock:
            ring = self._rings.setdefault(record.key, deque(maxlen=self.capacity))
            ring.append((next(self._sequence), record))
        return record

    def _build(self, facts: RequestFacts, severity: str) -> LogRecord:
        engine = facts.engine
        inference_ms = facts.inference_ms
        tokens_per_s = engine.decode_tokens_per_s if engine is not None else None
        if tokens_per_s is None and facts.tokens_out and inference_ms:
            tokens_per_s = round(facts.tokens_out / (inference_ms / 1000.0), 2)
        cached = facts.cached_tokens
        if cached is None and engine is not None:
            cached = engine.cached_tokens
        error = facts.error_message or facts.error_type
        record = LogRecord(
            id=facts.id,
            route=facts.route,
            method=facts.method,
            status=facts.status,
            key=facts.key_label,
            started_at=_rfc3339(facts.started_unix),
            duration_ms=round(facts.duration_ms, 3),
            model=facts.model,
            stream=facts.stream,
            tokens_in=facts.tokens_in,
            tokens_out=facts.tokens_out,
            cached_tokens=cached,
            tokens_per_s=tokens_per_s,
            inference_ms=inference_ms,
            tier_switch_ms=facts.tier_switch_ms,
            previous_tier=facts.previous_tier,
            error=self.redactor.message(error) if error else None,
            level=severity,
            truncated=False,
        )
        if facts.stages_ms:
            record.stages_ms = dict(facts.stages_ms)
        if facts.batch:
            record.batch = facts.batch
        if _RANK[self.level] >= _RANK["debug"]:
            record.input = self._captured(record, facts.input_text, MAX_TEXT_CHARS)
            record.output = self._captured(record, facts.output_text, MAX_TEXT_CHARS)
        if self.level == "trace":
            request_text, request_cut = _payload_text(facts.request_body, MAX_PAYLOAD_CHARS)
            response_text, response_cut = _payload_text(facts.response_body, MAX_PAYLOAD_CHARS)
            record.request_payload = self._captured(record, request_text, MAX_PAYLOAD_CHARS, request_cut)
            record.response_payload = self._captured(record, response_text, MAX_PAYLOAD_CHARS, response_cut)
        return record

    def _captured(
        self, record: LogRecord, text: str | None, limit: int, longer: bool = False
    ) -> str | msgspec.UnsetType:
        """Redact, then cut at `limit` characters, flagging the record as truncated."""
        if text is None:
            return msgspec.UNSET
        if len(text) > limit * 4:  # bound the regex work on huge bodies
            text, longer = text[: limit * 4], True
        text = self.redactor.text(text)
        if len(text) > limit:
            text, longer = text[:limit], True
        if longer:
            record.truncated = True
        return text

    def get(self, request_id: str, tenant: str | None = None) -> LogRecord | None:
        """The record with this x-request-id, or None (also when `tenant` is given and the record is another key's)."""
        with self._lock:
            records = self._records(tenant)
        for record in reversed(records):
            if record.id == request_id and (tenant is None or record.key == tenant):
                return record
        return None

    def query(
        self,
        *,
        model: str | None = None,
        route: str | None = None,
        status: str | None = None,
        key: str | None = None,
        limit: int | None = None,
        tenant: str | None = None,
    ) -> LogPage:
        """Stored records matching every given filter, newest first, at most `limit` (400 on a bad filter).

        With `tenant` (a non-admin key's label) only that key's records exist, for the filters and for `stored`.
        """
        if status is not None and status not in STATUS_FILTERS:
            raise invalid_request(f"status must be one of {', '.join(STATUS_FILTERS)}, got `{status}`")
        if limit is not None and limit < 1:
            raise invalid_request(f"limit must be a positive integer, got {limit}")
        with self._lock:
            records = self._records(tenant)
        stored = len(records)
        selected: list[LogRecord] = []
        for record in reversed(records):
            if model is not None and record.model != model:
                continue
            if route is not None and record.route != route:
                continue
            if key is not None and record.key != key:
                continue
            if status is not None and not _status_matches(record, status):
                continue
            selected.append(record)
            if limit is not None and len(selected) >= limit:
                break
        return LogPage(level=self.level, capacity=self.capacity, stored=stored, records=selected)


def _status_matches(record: LogRecord, wanted: str) -> bool:
    failed = record.status >= 400 or record.error is not None
    if wanted == "ok":
        return not failed
    if wanted == "error":
        return failed
    if wanted == "4xx":
        return 400 <= record.status < 500
    return record.status >= 500


def check_level(level: str) -> str:
    """The level when it is one of off..trace; 400 invalid_request_error otherwise."""
    if level not in _RANK:
        raise invalid_request(f"level must be one of {', '.join(LEVELS)}, got `{level}`")
    return level
