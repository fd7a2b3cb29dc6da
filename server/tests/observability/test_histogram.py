"""The shared latency histogram: Prometheus buckets, percentiles within 5% of the true ones, the label cap."""

from __future__ import annotations

import math
import random

import pytest
from hypnos_server.observability.histogram import OVERFLOW_LABEL, HistogramSet, LatencyHistogram


def test_empty_histogram_reports_zero() -> None:
    summary = LatencyHistogram().summary()
    assert (summary.p50, summary.p95, summary.p99, summary.count) == (0.0, 0.0, 0.0, 0)


def true_quantile(ordered: list[float], quantile: float) -> float:
    """The nearest-rank quantile of sorted samples."""
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_are_within_five_percent_of_the_true_quantiles(seed: int) -> None:
    rng = random.Random(seed)
    samples = [rng.lognormvariate(4.0, 1.5) for _ in range(20_000)]  # 0.1 ms .. minutes, a long tail
    histogram = LatencyHistogram()
    for value in samples:
        histogram.observe(value)
    ordered = sorted(samples)
    for quantile in (0.5, 0.95, 0.99):
        assert histogram.percentile(quantile) == pytest.approx(true_quantile(ordered, quantile), rel=0.05)


def test_three_voice_turns_report_their_own_figures_not_bucket_bounds() -> None:
    histogram = LatencyHistogram()
    for value in (1770.0, 2620.0, 2340.0):
        histogram.observe(value)
    summary = histogram.summary()
    assert summary.p50 == pytest.approx(2340.0, rel=0.05)
    assert summary.p95 == pytest.approx(2620.0, rel=0.05)
    assert summary.p99 == pytest.approx(2620.0, rel=0.05)


def test_a_single_value_reports_itself() -> None:
    histogram = LatencyHistogram((10, 100))
    histogram.observe(12345.5)
    assert histogram.percentile(0.5) == 12345.5
    assert histogram.percentile(0.99) == 12345.5
    assert histogram.max == 12345.5


def test_zero_latencies_are_counted() -> None:
    histogram = LatencyHistogram()
    for value in (0.0, -3.0, 0.0, 8.0):
        histogram.observe(value)
    assert histogram.percentile(0.5) == 0.0
    assert histogram.percentile(0.99) == pytest.approx(8.0, rel=0.05)


def test_cumulative_buckets_end_with_inf() -> None:
    histogram = LatencyHistogram((1, 2.5))
    for value in (0.5, 2, 3, -1):
        histogram.observe(value)
    buckets, count, total = histogram.cumulative()
    assert buckets == [("1.0", 2), ("2.5", 3), ("+Inf", 4)]
    assert count == 4
    assert total == 5.5


def test_histogram_set_caps_distinct_labels() -> None:
    histograms = HistogramSet((10,), max_labels=2)
    for label in ("a", "b", "c", "d"):
        histograms.observe(label, 1)
    labels = [label for label, _ in histograms.items()]
    assert labels == ["a", "b", OVERFLOW_LABEL]
    assert histograms.get(OVERFLOW_LABEL).count == 2
    assert set(histograms.summaries()) == {"a", "b", OVERFLOW_LABEL}
