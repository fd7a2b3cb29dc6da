"""The shared latency histogram: buckets, percentiles as bucket upper bounds, the label cap."""

from __future__ import annotations

from hypnos_server.observability.histogram import OVERFLOW_LABEL, HistogramSet, LatencyHistogram


def test_empty_histogram_reports_zero() -> None:
    summary = LatencyHistogram().summary()
    assert (summary.p50, summary.p95, summary.p99, summary.count) == (0.0, 0.0, 0.0, 0)


def test_percentiles_are_bucket_upper_bounds() -> None:
    histogram = LatencyHistogram((10, 100, 1000))
    for _ in range(90):
        histogram.observe(7)
    for _ in range(9):
        histogram.observe(70)
    histogram.observe(700)
    summary = histogram.summary()
    assert summary.count == 100
    assert summary.p50 == 10
    assert summary.p95 == 100
    assert summary.p99 == 100
    assert histogram.percentile(1.0) == 1000


def test_a_value_on_a_bound_falls_in_that_bucket() -> None:
    histogram = LatencyHistogram((10, 100))
    histogram.observe(10)
    assert histogram.percentile(0.5) == 10


def test_overflow_reports_the_largest_observation() -> None:
    histogram = LatencyHistogram((10,))
    histogram.observe(5)
    histogram.observe(12345.5)
    assert histogram.percentile(0.99) == 12345.5
    assert histogram.max == 12345.5


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
