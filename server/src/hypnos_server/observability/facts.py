"""What observability reads about one finished request, adapted once from the server's per-request record."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypnos.errors import clip
from hypnos.types import EngineTiming

from hypnos_server.state import RequestRecord

UNMATCHED_ROUTE = "unmatched"
_TYPED_PARAM = re.compile(r"\{([^}:]+):[^}]*\}")


@dataclass(slots=True, kw_only=True)
class RequestFacts:
    """One finished request: identity, outcome, usage, telemetry and (when captured) its text."""

    id: str
    route: str
    method: str
    status: int
    started_unix: float
    duration_ms: float
    key_label: str | None = None
    model: str | None = None
    stream: bool = False
    tokens_in: int | None = None
    tokens_out: int | None = None
    cached_tokens: int | None = None
    inference_ms: float | None = None
    tier_switch_ms: float | None = None
    previous_tier: str | None = None
    evicted_models: list[str] = field(default_factory=list)
    engine: EngineTiming | None = None
    error_type: str | None = None
    error_message: str | None = None
    workflow: str | None = None
    workflow_end: bool = False
    batch: str | None = None  # a batch line's `<batch id>/<custom_id>`
    stages_ms: dict[str, float] | None = None
    input_text: str | None = None
    output_text: str | None = None
    request_body: bytes | str | None = None
    response_body: bytes | str | None = None

    @property
    def ended_unix(self) -> float:
        """When the last byte went out (Unix seconds)."""
        return self.started_unix + self.duration_ms / 1000.0

    @property
    def failed(self) -> bool:
        """True for an HTTP error status or an error reported after the headers (a stream's error chunk)."""
        return self.status >= 400 or self.error_type is not None or self.error_message is not None

    @property
    def status_class(self) -> str:
        """`2xx`, `4xx`, `5xx`... from the HTTP status."""
        return f"{self.status // 100}xx"


@functools.lru_cache(maxsize=1024)
def route_label(template: str | None) -> str:
    """A route template as a metric label: `/v1/logs/{id:str}` -> `/v1/logs/{id}`; no route -> `unmatched`."""
    if not template:
        return UNMATCHED_ROUTE
    return _TYPED_PARAM.sub(r"{\1}", template)


def _get(record: Any, *names: str) -> Any:
    for name in names:
        value = getattr(record, name, None)
        if value is not None:
            return value
    return None


def _clipped(value: str | None) -> str | None:
    """A client-chosen model id as the log and the metrics keep it: at most ECHO_LIMIT characters."""
    return None if value is None else clip(value)


def facts_from_record(record: Any, resolve: Callable[[str], str | None] | None = None) -> RequestFacts:
    """Adapt the server's RequestRecord (read by attribute name, tolerant of missing ones) into RequestFacts.

    A record without a route (refused before routing) gets the template `resolve` finds for its raw path.
    """
    if isinstance(record, RequestFacts):
        return record
    if isinstance(record, RequestRecord):
        return _from_request_record(record, resolve)
    route = _get(record, "route")
    if route is None and resolve is not None:
        path = _get(record, "path")
        route = resolve(path) if path else None
    telemetry = _get(record, "telemetry")
    engine = _get(record, "engine_timing") or getattr(telemetry, "engine", None)
    previous_tier = _get(record, "previous_tier") or getattr(telemetry, "previous_tier", None)
    started = _get(record, "started_unix", "started_at")
    return RequestFacts(
        id=str(_get(record, "id", "request_id") or ""),
        route=route_label(route),
        method=str(_get(record, "method") or "GET"),
        status=int(_get(record, "status") or 0),
        started_unix=float(started) if started is not None else time.time(),
        duration_ms=float(_get(record, "duration_ms") or 0.0),
        key_label=_get(record, "key_label", "key"),
        model=_clipped(_get(record, "model")),
        stream=bool(_get(record, "stream")),
        tokens_in=_get(record, "tokens_in"),
        tokens_out=_get(record, "tokens_out"),
        cached_tokens=_get(record, "cached_tokens"),
        inference_ms=_get(record, "inference_ms") or getattr(telemetry, "inference_latency_ms", None),
        tier_switch_ms=_get(record, "tier_switch_ms") or getattr(telemetry, "tier_switch_latency_ms", None),
        previous_tier=str(previous_tier) if previous_tier is not None else None,
        evicted_models=list(_get(record, "evicted_models") or getattr(telemetry, "evicted_models", None) or []),
        engine=engine,
        error_type=_get(record, "error_type"),
        error_message=_get(record, "error", "error_message"),
        workflow=_get(record, "workflow"),
        workflow_end=bool(_get(record, "workflow_end")),
        stages_ms=_get(record, "stages_ms"),
        input_text=_get(record, "input_text"),
        output_text=_get(record, "output_text"),
        request_body=_get(record, "request_payload", "request_body"),
        response_body=_get(record, "response_payload", "response_body"),
    )


def _from_request_record(record: RequestRecord, resolve: Callable[[str], str | None] | None) -> RequestFacts:
    """The fast path for the server's own record type."""
    route = record.route
    if route is None and resolve is not None:
        route = resolve(record.path)
    telemetry = record.telemetry
    return RequestFacts(
        id=record.id,
        route=route_label(route),
        method=record.method,
        status=record.status,
        started_unix=record.started_at,
        duration_ms=record.duration_ms,
        key_label=record.key,
        model=_clipped(record.model),
        stream=record.stream,
        tokens_in=record.tokens_in,
        tokens_out=record.tokens_out,
        cached_tokens=record.cached_tokens,
        inference_ms=record.inference_ms,
        tier_switch_ms=record.tier_switch_ms,
        previous_tier=record.previous_tier,
        evicted_models=list(getattr(telemetry, "evicted_models", None) or ()),
        engine=getattr(telemetry, "engine", None),
        error_type=record.error_type,
        error_message=record.error,
        workflow=record.workflow,
        workflow_end=record.workflow_end,
        batch=record.batch,
        stages_ms=record.stages_ms,
        input_text=record.input_text,
        output_text=record.output_text,
        request_body=record.request_payload,
        response_body=record.response_payload,
    )
