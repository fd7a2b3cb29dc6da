"""The `hypnos_realtime_*` families: realtime voice sessions open, responses by outcome, barge-ins, and the time from
the end of the user's speech to the first audio out (with each stage of the turn) as histograms."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from hypnos_server.observability.facts import RequestFacts
from hypnos_server.observability.histogram import LatencyHistogram

ROUTE = "/v1/realtime"
FIRST_AUDIO = "end_of_speech_to_first_audio_ms"  # the stage key the first-audio histogram reads
# a realtime response record's stage keys (RequestRecord.stages_ms) -> the `stage` label of hypnos_realtime_stage_ms
STAGES = {
    "transcription_ms": "transcription",
    "transcription_wait_ms": "transcription_wait",
    "chat_first_token_ms": "chat_first_token",
    "chat_first_phrase_ms": "chat_first_phrase",
    "chat_ms": "chat",
    "speech_first_audio_ms": "speech_first_audio",
}
# voice latency lives around a second: finer buckets there than the request histograms'
FIRST_AUDIO_BOUNDS_MS = (
    50, 100, 150, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1250, 1500, 2000, 2500, 3000, 5000, 10000, 30000,
)  # fmt: skip
OUTCOMES = ("completed", "cancelled", "failed", "rate_limited")


def outcome(facts: RequestFacts) -> str:
    """A realtime response's outcome from its record: completed, cancelled, rate_limited or failed."""
    if facts.status == 429:
        return "rate_limited"
    if facts.error_type == "cancelled":
        return "cancelled"
    return "failed" if facts.failed else "completed"


class RealtimeMetrics:
    """Fed by the realtime sessions (opened, closed, barge-ins) and by each response's record."""

    def __init__(self) -> None:
        self.open = 0
        self.opened = 0
        self.barge_ins = 0
        self.responses = dict.fromkeys(OUTCOMES, 0)
        self.first_audio = LatencyHistogram(FIRST_AUDIO_BOUNDS_MS)
        self.stages = {label: LatencyHistogram(FIRST_AUDIO_BOUNDS_MS) for label in STAGES.values()}
        self._lock = threading.Lock()

    def session_opened(self) -> None:
        """A session started."""
        with self._lock:
            self.open += 1
            self.opened += 1

    def session_closed(self) -> None:
        """A session ended."""
        with self._lock:
            self.open -= 1

    def barge_in(self) -> None:
        """User speech cancelled a response."""
        with self._lock:
            self.barge_ins += 1

    def observe(self, facts: RequestFacts) -> None:
        """Count one finished (or refused) response and its stage timings."""
        with self._lock:
            self.responses[outcome(facts)] += 1
        stages = facts.stages_ms or {}
        if (first := stages.get(FIRST_AUDIO)) is not None:
            self.first_audio.observe(first)
        for key, label in STAGES.items():
            if (value := stages.get(key)) is not None:
                self.stages[label].observe(value)

    def families(self) -> Iterator[Any]:
        """The families as prometheus_client exposes them."""
        yield GaugeMetricFamily("hypnos_realtime_sessions_open", "Realtime voice sessions open now.", value=self.open)
        yield CounterMetricFamily("hypnos_realtime_sessions", "Realtime voice sessions started.", value=self.opened)
        responses = CounterMetricFamily(
            "hypnos_realtime_responses", "Realtime responses by outcome.", labels=["status"]
        )
        for status, count in self.responses.items():
            responses.add_metric([status], count)
        yield responses
        yield CounterMetricFamily(
            "hypnos_realtime_barge_ins", "Responses cancelled by the user speaking.", value=self.barge_ins
        )
        first = HistogramMetricFamily(
            "hypnos_realtime_first_audio_ms",
            "Realtime time from the end of the user's speech (VAD stop or commit) to the first audio out (ms).",
        )
        buckets, _count, total = self.first_audio.cumulative()
        first.add_metric([], buckets, total)
        yield first
        stages = HistogramMetricFamily(
            "hypnos_realtime_stage_ms", "Realtime turn stages: transcription, chat first token, first phrase and "
            "total, speech first audio (ms).", labels=["stage"]
        )  # fmt: skip
        for label, histogram in self.stages.items():
            buckets, _count, total = histogram.cumulative()
            stages.add_metric([label], buckets, total)
        yield stages
