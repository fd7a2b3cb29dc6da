"""Observability for one app: the request observer feeding the latency histograms, workflows, log and metrics."""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec
from hypnos.config import Settings

from hypnos_server.observability.facts import RequestFacts, facts_from_record
from hypnos_server.observability.histogram import LATENCY_BOUNDS_MS, HistogramSet
from hypnos_server.observability.metrics import CountersProvider, HypnosMetrics, StatusProvider
from hypnos_server.observability.request_log import RequestLog
from hypnos_server.observability.route_templates import RouteTemplates
from hypnos_server.observability.workflows import WorkflowTracker

logger = logging.getLogger(__name__)

MAX_ROUTE_LABELS = 256


class Observability:
    """Owns the per-app latency histograms, workflow tracker, request log and Prometheus registry."""

    def __init__(
        self,
        settings: Settings,
        *,
        status: StatusProvider | None = None,
        scheduler_counters: CountersProvider | None = None,
        started_unix: float | None = None,
        route_templates: RouteTemplates | None = None,
    ) -> None:
        server = settings.server
        self.route_templates = route_templates
        self.routes = HistogramSet(LATENCY_BOUNDS_MS, max_labels=MAX_ROUTE_LABELS)
        self.workflows = WorkflowTracker(server.workflow_idle_secs)
        self.log = RequestLog(server.request_log_capacity, server.request_log_level, server.request_log_redact)
        self.metrics = HypnosMetrics(
            routes=self.routes,
            workflows=self.workflows,
            status=status,
            scheduler_counters=scheduler_counters,
            started_unix=time.time() if started_unix is None else started_unix,
        )

    def observe(self, record: Any) -> None:
        """The request observer: record one finished request everywhere, once."""
        resolve = self.route_templates.resolve if self.route_templates is not None else None
        facts = facts_from_record(record, resolve)
        self.observe_facts(facts)

    def observe_facts(self, facts: RequestFacts) -> None:
        """Record already-adapted facts (tests and the server's observer both end here)."""
        self.routes.observe(facts.route, facts.duration_ms)
        if facts.workflow:
            self.workflows.record(facts.workflow, facts.started_unix, facts.ended_unix, end=facts.workflow_end)
        self.metrics.observe(facts)
        self.log.capture(facts)

    def latency(self) -> dict[str, Any]:
        """The `latency` object of GET /v1/memory/status: p50/p95/p99 and count per route and per workflow."""
        return {
            "routes": msgspec.to_builtins(self.routes.summaries()),
            "workflows": msgspec.to_builtins(self.workflows.summaries()),
        }
