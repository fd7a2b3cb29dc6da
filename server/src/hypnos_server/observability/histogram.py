"""One latency record per series: Prometheus buckets for `/metrics`, a DDSketch for the status `latency` quantiles."""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable

import msgspec
from ddsketch import DDSketch

# Upper bounds (ms) of the end-to-end latency buckets: sub-millisecond fast paths up to the 900 s request timeout.
LATENCY_BOUNDS_MS: tuple[float, ...] = (
    1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000, 900000,
)  # fmt: skip

OVERFLOW_LABEL = "other"
# The sketch's relative-error bound: a reported quantile is within 1% of the true one (the status promises 5%).
SKETCH_RELATIVE_ACCURACY = 0.01


class LatencySummary(msgspec.Struct, kw_only=True):
    """p50 / p95 / p99 (ms, within 1% of the true quantiles), with the number of observations."""

    p50: float
    p95: float
    p99: float
    count: int


class LatencyHistogram:
    """Counts observations into fixed buckets (for Prometheus) and a DDSketch (percentiles within 1%)."""

    def __init__(self, bounds: Iterable[float] = LATENCY_BOUNDS_MS) -> None:
        self.bounds: tuple[float, ...] = tuple(sorted(float(b) for b in bounds))
        if not self.bounds:
            raise ValueError("a histogram needs at least one bucket bound")
        self._counts = [0] * (len(self.bounds) + 1)  # the last slot is the +Inf bucket
        self._sum = 0.0
        self._max = 0.0
        self._min = float("inf")
        self._sketch = DDSketch(relative_accuracy=SKETCH_RELATIVE_ACCURACY)
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Count one observation (negative values count as 0)."""
        value = max(0.0, float(value))
        index = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[index] += 1
            self._sum += value
            self._max = max(self._max, value)
            self._min = min(self._min, value)
            self._sketch.add(value)

    @property
    def count(self) -> int:
        """How many observations were made."""
        return sum(self._counts)

    @property
    def sum(self) -> float:
        """The sum of every observation."""
        return self._sum

    @property
    def max(self) -> float:
        """The largest observation (0 when none)."""
        return self._max

    def percentile(self, quantile: float) -> float:
        """The nearest-rank quantile (0..1) of the observations, within the sketch's 1% relative error; 0 when none."""
        with self._lock:
            total = int(self._sketch.count)
            if total == 0:
                return 0.0
            # DDSketch returns the value at rank q x (n - 1); ask for the nearest rank ceil(q x n) instead.
            rank = max(0, math.ceil(min(1.0, max(0.0, quantile)) * total) - 1)
            value = self._sketch.get_quantile_value(min(1.0, (rank + 0.5) / (total - 1)) if total > 1 else 0.5)
            smallest, largest = self._min, self._max
        return round(min(max(float(value or 0.0), smallest), largest), 3)

    def summary(self) -> LatencySummary:
        """p50, p95 and p99 with the count."""
        return LatencySummary(
            p50=self.percentile(0.50), p95=self.percentile(0.95), p99=self.percentile(0.99), count=self.count
        )

    def cumulative(self) -> tuple[list[tuple[str, int]], int, float]:
        """Prometheus-style buckets (`le` label, cumulative count, ending with +Inf), the count and the sum."""
        with self._lock:
            counts = list(self._counts)
            total_sum = self._sum
        buckets: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip(self.bounds, counts, strict=False):
            running += count
            buckets.append((_format_bound(bound), running))
        running += counts[-1]
        buckets.append(("+Inf", running))
        return buckets, running, total_sum


def _format_bound(bound: float) -> str:
    """Bucket bounds as Prometheus writes them (`1.0`, `2.5`)."""
    return repr(float(bound))


class HistogramSet:
    """Histograms keyed by one label value; past `max_labels` distinct values, new ones share the `other` series."""

    def __init__(self, bounds: Iterable[float] = LATENCY_BOUNDS_MS, max_labels: int = 256) -> None:
        self.bounds = tuple(bounds)
        self.max_labels = max_labels
        self._histograms: dict[str, LatencyHistogram] = {}
        self._lock = threading.Lock()

    def get(self, label: str) -> LatencyHistogram:
        """The histogram for a label value, created on first use (or the overflow series once full)."""
        histogram = self._histograms.get(label)
        if histogram is not None:
            return histogram
        with self._lock:
            if label not in self._histograms and len(self._histograms) >= self.max_labels:
                label = OVERFLOW_LABEL
            return self._histograms.setdefault(label, LatencyHistogram(self.bounds))

    def observe(self, label: str, value: float) -> None:
        """Count one observation under a label value."""
        self.get(label).observe(value)

    def items(self) -> list[tuple[str, LatencyHistogram]]:
        """Every (label value, histogram) pair, sorted by label."""
        with self._lock:
            return sorted(self._histograms.items())

    def summaries(self) -> dict[str, LatencySummary]:
        """p50 / p95 / p99 and count per label value, for those with observations."""
        return {label: h.summary() for label, h in self.items() if h.count}
