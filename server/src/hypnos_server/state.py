"""The app-wide HypnosState and the per-request context and record that one place finalizes."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import pluggy
from hypnos.config import Settings
from hypnos.scheduler import Scheduler

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection

    from hypnos_server.asgi.keylimits import KeyLimiter
    from hypnos_server.asgi.keys import ApiKey, KeyRing
    from hypnos_server.catalog import Catalog
    from hypnos_server.model_pool import ModelPool
    from hypnos_server.realtime.detectors import SpeechDetectors
    from hypnos_server.responses_store import ResponseStore

logger = logging.getLogger(__name__)

CONTEXT_KEY = "hypnos_request"


class RequestRecord(msgspec.Struct, kw_only=True):
    """What one request did; routes fill it, the pipeline finalizes it after the last byte and hands it to observers."""

    id: str
    method: str
    path: str
    started_at: float
    route: str | None = None
    status: int = 0
    duration_ms: float = 0.0
    key: str | None = None
    model: str | None = None
    # every modality the request was leased for (a chat with an image and an audio part: three)
    modalities: list[str] = []
    stream: bool = False
    tokens_in: int = 0
    tokens_out: int = 0
    cached_tokens: int = 0
    inference_ms: float | None = None
    tier_switch_ms: float | None = None
    previous_tier: str | None = None
    error: str | None = None
    error_type: str | None = None
    workflow: str | None = None
    workflow_end: bool = False
    # a batch line's `<batch id>/<custom_id>` (the request log shows it); None for a request a client sent
    batch: str | None = None
    # Read by observability: the response's hypnos_telemetry (engine timings for /metrics), the text the request log
    # keeps at debug (input/output) and the bodies it keeps at trace (filled only while the log level is trace).
    telemetry: Any = None
    # a realtime response's stage timings (ms): transcription, chat first token, first phrase and total, speech first
    # audio, end of the user's speech to the first audio out (observability/realtime.py names them)
    stages_ms: dict[str, float] | None = None
    input_text: str | None = None
    output_text: str | None = None
    request_payload: bytes | None = None
    response_payload: bytes | None = None

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens, what tokens_per_day is charged."""
        return self.tokens_in + self.tokens_out


def new_request_id() -> str:
    """A fresh `req-<32 hex>` id."""
    return "req-" + secrets.token_hex(16)


@dataclass
class RequestContext:
    """Per-request state kept in the ASGI scope: the record, the caller's key, and cleanups run after the last byte."""

    record: RequestRecord
    started: float = field(default_factory=time.perf_counter)
    key: ApiKey | None = None
    closers: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)
    # gives the key's concurrency slot back; whoever ends the work calls it (a background run takes it along)
    release_permit: Callable[[], None] | None = None
    # a batch line's scheduling (hypnos_server.batches.dispatch.LineLeases): its priority, the leases it got
    batch: Any = None

    def take_permit(self) -> Callable[[], None] | None:
        """The concurrency slot's release, now owned by the caller (None: no slot held, or already taken)."""
        release, self.release_permit = self.release_permit, None
        return release

    def finish(self, limiter: KeyLimiter) -> None:
        """End the record: its duration, the key's concurrency slot given back and its tokens charged."""
        self.record.duration_ms = round((time.perf_counter() - self.started) * 1000, 3)
        if (release := self.take_permit()) is not None:
            release()
        if self.key is not None:
            limiter.charge(self.key, self.record.tokens)

    def defer(self, closer: Callable[[], Awaitable[Any]]) -> None:
        """Run `closer` once the response is over (also when it never started)."""
        self.closers.append(closer)

    async def run_closers(self) -> None:
        """Run every deferred closer, logging (never raising) failures."""
        while self.closers:
            closer = self.closers.pop()
            try:
                await closer()
            except Exception:
                logger.exception("a request cleanup failed (request %s)", self.record.id)


def request_context(connection: ASGIConnection[Any, Any, Any, Any] | dict[str, Any]) -> RequestContext:
    """The RequestContext of a request (from a Litestar connection or a raw scope)."""
    scope = connection if isinstance(connection, dict) else connection.scope
    return scope["state"][CONTEXT_KEY]


Observer = Callable[[RequestRecord], None]


@dataclass
class HypnosState:
    """Everything the app shares, on `app.state.hypnos`: settings, scheduler, plugins, keys, limits, observers."""

    settings: Settings
    scheduler: Scheduler
    plugin_manager: pluggy.PluginManager
    keys: KeyRing
    limiter: KeyLimiter
    version: str
    started_at: float = field(default_factory=time.time)
    started_monotonic: float = field(default_factory=time.monotonic)
    observers: list[Observer] = field(default_factory=list)
    staging_task: asyncio.Task[None] | None = None
    catalog: Catalog | None = None
    pool: ModelPool | None = None
    # the Ray cluster backend (hypnos_server.cluster.front.ClusterBackend) when [cluster] is configured
    cluster: Any = None
    # stored /v1/responses (SQLite under the data dir) and the responses being generated now, by id (for cancel)
    responses: ResponseStore | None = None
    # Anthropic message threads (anthropic-beta message-threads-2026-08-12), stored per key like responses
    threads: ResponseStore | None = None
    live_responses: dict[str, Any] = field(default_factory=dict)
    # the tasks running background responses (cancelled at shutdown, which stores them as failed)
    background: set[asyncio.Task[None]] = field(default_factory=set)
    # the Files and Batches APIs (hypnos_server.batches.service.BatchService)
    batches: Any = None
    # the realtime server VAD's detectors (built in and from plugins) and the default one; None: energy only
    speech_detectors: SpeechDetectors | None = None

    @property
    def backend(self) -> Any:
        """Where requests lease models: this machine's scheduler, or the cluster's nodes (same `lease` contract)."""
        return self.scheduler if self.cluster is None else self.cluster

    @property
    def uptime_secs(self) -> int:
        """Whole seconds since the app was built."""
        return int(time.monotonic() - self.started_monotonic)

    def notify(self, record: RequestRecord) -> None:
        """Hand a finished record to every observer; an observer's failure is logged, never raised."""
        for observer in list(self.observers):
            try:
                observer(record)
            except Exception:
                logger.exception("request observer %r failed", observer)


def hypnos_state(connection: ASGIConnection[Any, Any, Any, Any]) -> HypnosState:
    """The HypnosState of the app serving this connection."""
    return connection.app.state.hypnos
