"""Workflow tracking: header parsing, end header, idle expiry, per-name e2e time."""

from __future__ import annotations

import pytest
from hypnos_server.observability.workflows import WorkflowTracker, is_workflow_end, parse_workflow_header


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("voice/abc-1", ("voice", "abc-1")),
        (" voice/a/b ", ("voice", "a/b")),
        ("voice", ("voice", "")),
        ("", None),
        (None, None),
        ("bad name/1", None),
        ("/1", None),
        ("x" * 65 + "/1", None),
    ],
)
def test_parse_header(header: str | None, expected: tuple[str, str] | None) -> None:
    assert parse_workflow_header(header) == expected


def test_end_header_values() -> None:
    assert is_workflow_end("true") and is_workflow_end("True") and is_workflow_end("1")
    assert not is_workflow_end(None) and not is_workflow_end("false")


def test_end_header_closes_with_first_start_to_last_byte() -> None:
    clock = Clock()
    tracker = WorkflowTracker(30.0, clock=clock)
    tracker.record("voice/1", 1000.0, 1000.5)  # transcription
    tracker.record("voice/1", 1000.6, 1001.2)  # chat
    assert tracker.summaries() == {}
    tracker.record("voice/1", 1001.3, 1002.0, end=True)  # speech
    summary = tracker.summaries()["voice"]
    assert summary.count == 1
    assert summary.p50 == pytest.approx(2000, rel=0.05)  # first start to last byte
    assert tracker.open_count == 0


def test_idle_workflow_closes_lazily() -> None:
    clock = Clock()
    tracker = WorkflowTracker(30.0, clock=clock)
    tracker.record("batch/7", 1000.0, 1000.004)
    clock.now = 1029.0
    assert tracker.summaries() == {}
    clock.now = 1031.0
    summary = tracker.summaries()["batch"]
    assert summary.count == 1 and summary.p99 == pytest.approx(4, rel=0.05)
    assert tracker.open_count == 0


def test_separate_ids_are_separate_workflows() -> None:
    tracker = WorkflowTracker(30.0, clock=Clock())
    tracker.record("voice/1", 1000.0, 1000.001, end=True)
    tracker.record("voice/2", 1000.0, 1000.020, end=True)
    tracker.record(None, 1000.0, 1000.020, end=True)
    assert tracker.summaries()["voice"].count == 2


def test_open_workflows_are_bounded() -> None:
    tracker = WorkflowTracker(30.0, max_open=3, clock=Clock())
    for index in range(10):
        tracker.record(f"w/{index}", 1000.0, 1000.0)
    assert tracker.open_count == 3


def test_workflow_names_are_capped() -> None:
    tracker = WorkflowTracker(30.0, max_names=2, clock=Clock())
    for name in ("a", "b", "c"):
        tracker.record(f"{name}/1", 1000.0, 1000.0, end=True)
    assert set(tracker.summaries()) == {"a", "b", "other"}
