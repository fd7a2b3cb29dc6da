"""A realtime response in the request log (one record with its stage timings) and the hypnos_realtime_* metrics."""

from __future__ import annotations

import re
import time
from typing import Any

from litestar.testing import TestClient
from realtime_kit import append, realtime_app, tone, until
from server_kit import wait_ready

STAGES = {
    "transcription_ms",
    "transcription_wait_ms",
    "chat_first_token_ms",
    "chat_first_phrase_ms",
    "chat_ms",
    "speech_first_audio_ms",
    "end_of_speech_to_first_audio_ms",
}


def _metric(client: TestClient[Any], sample: str) -> float:
    """The value of one sample line of /metrics (name with its labels, as printed)."""
    text = client.get("/metrics").text
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"no {sample} in /metrics"
    return float(match.group(1))


def test_a_spoken_turn_leaves_a_record_with_its_stage_timings_and_metrics() -> None:
    with TestClient(realtime_app()) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            ws.receive_json()
            assert _metric(client, "hypnos_realtime_sessions_open") == 1
            append(ws, tone(400) + tone(700, 0))
            done, _ = until(ws, "response.done")
            assert done["response"]["status"] == "completed"
        (record,) = client.get("/v1/logs", params={"route": "/v1/realtime"}).json()["records"]
        stages = record["stages_ms"]
        assert set(stages) == STAGES and min(stages.values()) >= 0, stages
        # the stages run one after the other between the end of speech and the first audio
        before_audio = stages["transcription_ms"] + stages["chat_first_token_ms"]
        assert stages["end_of_speech_to_first_audio_ms"] + 0.2 >= before_audio
        assert _metric(client, 'hypnos_realtime_responses_total{status="completed"}') == 1
        assert _metric(client, "hypnos_realtime_sessions_total") == 1
        assert _metric(client, "hypnos_realtime_first_audio_ms_count") == 1
        assert _metric(client, 'hypnos_realtime_stage_ms_count{stage="transcription"}') == 1
        first = stages["end_of_speech_to_first_audio_ms"]
        assert _metric(client, "hypnos_realtime_first_audio_ms_sum") == first


def test_barge_in_and_closed_sessions_are_counted() -> None:
    with TestClient(realtime_app(chat={"tokens": 400, "token_ms": 20})) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            ws.receive_json()
            append(ws, tone(400) + tone(700, 0))
            until(ws, "response.audio.delta")
            append(ws, tone(100))  # the user speaks again
            done, _ = until(ws, "response.done")
            assert done["response"]["status"] == "cancelled"
        assert _metric(client, "hypnos_realtime_barge_ins_total") == 1
        assert _metric(client, 'hypnos_realtime_responses_total{status="cancelled"}') == 1
        for _ in range(500):  # the session's end runs after the client hung up
            if _metric(client, "hypnos_realtime_sessions_open") == 0:
                break
            time.sleep(0.01)
        assert _metric(client, "hypnos_realtime_sessions_open") == 0
        (record,) = client.get("/v1/logs", params={"route": "/v1/realtime"}).json()["records"]
        assert record["status"] == 499 and "end_of_speech_to_first_audio_ms" in record["stages_ms"]
