"""Declared workflows (`x-hypnos-workflow: <name>/<id>`): end-to-end time from first start to last byte, per name."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hypnos_server.observability.histogram import LATENCY_BOUNDS_MS, HistogramSet, LatencySummary

WORKFLOW_HEADER = "x-hypnos-workflow"
WORKFLOW_END_HEADER = "x-hypnos-workflow-end"

_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_MAX_ID_CHARS = 200


def parse_workflow_header(value: str | None) -> tuple[str, str] | None:
    """(name, id) from `<name>/<id>` (a bare name has the id ""); None when absent or malformed."""
    if not value:
        return None
    name, _, workflow_id = value.strip().partition("/")
    if not _NAME.match(name) or len(workflow_id) > _MAX_ID_CHARS:
        return None
    return name, workflow_id


def is_workflow_end(value: str | None) -> bool:
    """True when the end header says `true` (case-insensitive) or `1`."""
    return value is not None and value.strip().lower() in {"true", "1"}


@dataclass
class _OpenWorkflow:
    first_start: float
    last_end: float


class WorkflowTracker:
    """Open workflows keyed by (name, id); closed by the end header or after `idle_secs` without a request."""

    def __init__(
        self,
        idle_secs: float = 30.0,
        *,
        max_open: int = 10_000,
        max_names: int = 64,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.idle_secs = idle_secs
        self.max_open = max_open
        self.histograms = HistogramSet(LATENCY_BOUNDS_MS, max_labels=max_names)
        self._clock = clock
        self._open: dict[tuple[str, str], _OpenWorkflow] = {}
        self._lock = threading.Lock()

    def record(self, header: str | None, started: float, ended: float, *, end: bool = False) -> None:
        """Add one request (start and last byte, Unix seconds) to its workflow; `end` closes it."""
        parsed = parse_workflow_header(header)
        self.expire()
        if parsed is None:
            return
        with self._lock:
            current = self._open.get(parsed)
            if current is None:
                if len(self._open) >= self.max_open:  # drop the oldest rather than grow without bound
                    self._open.pop(next(iter(self._open)))
                current = self._open[parsed] = _OpenWorkflow(first_start=started, last_end=ended)
            else:
                current.first_start = min(current.first_start, started)
                current.last_end = max(current.last_end, ended)
            if end:
                del self._open[parsed]
        if end:
            self.histograms.observe(parsed[0], (current.last_end - current.first_start) * 1000.0)

    def expire(self) -> None:
        """Close every workflow idle for longer than `idle_secs`, counting its time up to its last byte."""
        now = self._clock()
        closed: list[tuple[str, _OpenWorkflow]] = []
        with self._lock:
            for key, flow in list(self._open.items()):
                if now - flow.last_end > self.idle_secs:
                    closed.append((key[0], self._open.pop(key)))
        for name, flow in closed:
            self.histograms.observe(name, (flow.last_end - flow.first_start) * 1000.0)

    @property
    def open_count(self) -> int:
        """How many workflows are still open."""
        return len(self._open)

    def summaries(self) -> dict[str, LatencySummary]:
        """p50 / p95 / p99 and count per workflow name (after closing idle ones)."""
        self.expire()
        return self.histograms.summaries()
