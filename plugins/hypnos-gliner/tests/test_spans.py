"""Families, windows and the greedy resolution, without a model."""

from __future__ import annotations

from hypnos_gliner.spans import Candidate, label_families, plan_windows, resolve, unique_labels


def test_families_of_eight_keep_every_label_once() -> None:
    labels = unique_labels([f"label {i}" for i in range(30)] + ["label 3"])
    families = label_families(labels, 8)
    assert [len(f) for f in families] == [8, 8, 8, 6]
    assert [label for family in families for label in family] == labels
    assert label_families(["a", "b"], 8) == [["a", "b"]]


def test_a_text_that_fits_is_one_window() -> None:
    assert [(w.first, w.stop, w.own_first, w.own_stop) for w in plan_windows([1] * 50, 384, 500, 24)] == [
        (0, 50, 0, 50)
    ]


def test_windows_cover_the_text_and_own_each_start_once() -> None:
    count, max_width = 5000, 12
    windows = plan_windows([1] * count, 384, None, 2 * max_width)
    assert windows[0].first == 0 and windows[-1].stop == count and len(windows) > 1
    assert all(w.stop - w.first <= 384 for w in windows)
    owners = [sum(w.owns(start) for w in windows) for start in range(count)]
    assert owners == [1] * count
    # a span of up to max_width words starting anywhere lies whole inside the window that owns its start
    for start in range(count):
        window = next(w for w in windows if w.owns(start))
        assert window.first <= start and min(start + max_width, count) <= window.stop


def test_windows_respect_the_subword_budget() -> None:
    counts = [3, 1] * 400  # 800 words, 1600 subword tokens
    windows = plan_windows(counts, 384, 100, 24)
    for window in windows:
        assert sum(counts[window.first : window.stop]) <= 100
    assert windows[-1].stop == len(counts)


def test_flat_keeps_the_best_of_overlapping_spans() -> None:
    spans = [
        Candidate(0, 11, "person", 0.9),
        Candidate(0, 5, "person", 0.95),
        Candidate(6, 20, "city", 0.8),
        Candidate(21, 26, "city", 0.7),
    ]
    assert resolve(spans, flat=True) == [spans[1], spans[2], spans[3]]


def test_nested_keeps_inner_spans_but_not_partial_overlaps() -> None:
    outer, inner, partial = Candidate(0, 20, "org", 0.9), Candidate(0, 5, "person", 0.8), Candidate(15, 25, "x", 0.7)
    assert resolve([partial, inner, outer], flat=False) == [outer, inner]


def test_the_same_span_keeps_its_best_label() -> None:
    spans = [Candidate(3, 8, "city", 0.6), Candidate(3, 8, "country", 0.7)]
    assert resolve(spans, flat=False) == [spans[1]]
