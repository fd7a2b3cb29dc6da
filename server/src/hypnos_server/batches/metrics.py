"""The hypnos_batch_* Prometheus families, read from the batch service at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from hypnos_server.batches.service import BatchCounters

STATUSES = ("validating", "in_progress", "finalizing", "cancelling", "completed", "failed", "expired", "cancelled")


class BatchCollector:
    """A prometheus_client collector of one app's batch counters."""

    def __init__(self, counters: BatchCounters) -> None:
        self.counters = counters

    def collect(self) -> Iterator[Any]:
        """Lines by endpoint and outcome, slots yielded to interactive requests, batches by status."""
        counters = self.counters
        lines = CounterMetricFamily(
            "hypnos_batch_lines", "Batch lines answered, by endpoint and outcome.", labels=["endpoint", "outcome"]
        )
        for (endpoint, outcome), count in sorted(counters.lines.items()):
            lines.add_metric([endpoint, outcome], count)
        yield lines
        yield CounterMetricFamily(
            "hypnos_batch_yields", "Batch lines that gave their slot to an interactive request.", value=counters.yields
        )
        batches = GaugeMetricFamily("hypnos_batch_jobs", "Batches known to the server, by status.", labels=["status"])
        known = list(counters.statuses.values())
        for status in STATUSES:
            batches.add_metric([status], known.count(status))
        yield batches
