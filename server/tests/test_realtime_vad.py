"""The realtime server VAD's detector: a plugin's (the `hypnos_speech_detectors` hook) is the default, config and
session.update choose another, a failing one leaves the session on the energy gate."""

from __future__ import annotations

import array
import time
from typing import Any

import pytest
from hypnos.config import ConfigError
from hypnos.hookspecs import hookimpl
from hypnos_server.plugin_api import SpeechDetectorKind
from hypnos_server.realtime.vad import PAUSE_MS
from litestar.testing import TestClient
from realtime_kit import append, leases, realtime_app, tone, types, until
from server_kit import wait_ready


class QuietDetector:
    """A stand-in model: speech is a frame whose peak is between 100 and 1000 (what the energy gate calls quiet)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def is_speech(self, frame: bytes) -> bool:
        """True for a quiet, non-silent frame."""
        peak = max(array.array("h", frame), default=0)
        return 100 <= peak <= 1000


class BrokenDetector:
    """A detector whose model fails on the first frame."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def is_speech(self, frame: bytes) -> bool:
        """Fails."""
        raise RuntimeError("the model file is gone")


class DetectorPlugin:
    """Offers `quiet` (a blocking detector, fed off the event loop) and `broken`."""

    @hookimpl
    def hypnos_speech_detectors(self) -> list[SpeechDetectorKind]:
        return [
            SpeechDetectorKind("quiet", QuietDetector, "quiet frames"),
            SpeechDetectorKind("broken", BrokenDetector),
        ]


def _app(**server: Any) -> Any:
    return realtime_app(plugins=[DetectorPlugin()], **({"server": server} if server else {}))


def _heard(ws: Any, pcm: bytes) -> list[str]:
    """The event types the audio makes, read up to the `input_audio_buffer.cleared` sent after it."""
    append(ws, pcm)
    ws.send_json({"type": "input_audio_buffer.clear"})
    return types(until(ws, "input_audio_buffer.cleared")[1])


def test_a_plugins_detector_is_the_default_and_session_update_picks_another() -> None:
    quiet, loud = tone(200, 300), tone(200, 8000)  # below and above the energy gate's -40 dBFS
    with TestClient(_app()) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            assert ws.receive_json()["session"]["hypnos"]["speech_detector"] == "quiet"
            ws.send_json({"type": "session.update", "session": {"turn_detection": {"create_response": False}}})
            until(ws, "session.updated")
            assert "input_audio_buffer.speech_started" in _heard(ws, quiet)
            assert "input_audio_buffer.speech_started" not in _heard(ws, loud)
            ws.send_json({"type": "session.update", "session": {"hypnos": {"speech_detector": "energy"}}})
            assert until(ws, "session.updated")[0]["session"]["hypnos"]["speech_detector"] == "energy"
            assert "input_audio_buffer.speech_started" not in _heard(ws, quiet)
            assert "input_audio_buffer.speech_started" in _heard(ws, loud)
            ws.send_json({"type": "session.update", "session": {"hypnos": {"speech_detector": "nope"}}})
            error = until(ws, "error")[0]["error"]
            assert error["param"] == "session.hypnos.speech_detector" and "energy" in error["message"]


def test_config_names_the_default_detector() -> None:
    with TestClient(_app(realtime_vad="energy")) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            assert ws.receive_json()["session"]["hypnos"]["speech_detector"] == "energy"
    with pytest.raises(ConfigError, match=r"realtime_vad.*silero"):
        _app(realtime_vad="silero")


def test_without_a_plugin_detector_the_energy_gate_hears_turns() -> None:
    with TestClient(realtime_app(server={"realtime_vad": "auto"})) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            assert ws.receive_json()["session"]["hypnos"]["speech_detector"] == "energy"


def test_a_failing_detector_leaves_the_session_on_the_energy_gate() -> None:
    with TestClient(_app(realtime_vad="broken")) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            assert ws.receive_json()["session"]["hypnos"]["speech_detector"] == "broken"
            ws.send_json({"type": "session.update", "session": {"turn_detection": {"create_response": False}}})
            until(ws, "session.updated")
            append(ws, tone(40, 8000))
            error = until(ws, "error")[0]["error"]
            assert error["code"] == "speech_detector_failed" and "energy" in error["message"]
            assert "input_audio_buffer.speech_started" in _heard(ws, tone(200, 8000))


def _stt_idle(client: Any) -> None:
    """Wait until no transcription holds the STT model (what real-time pace gives: 300 ms of speech go by)."""
    deadline = time.monotonic() + 10
    while leases(client)["stt"]:
        assert time.monotonic() < deadline, "the transcription never ended"
        time.sleep(0.01)


def test_the_transcription_starts_in_the_pause_before_the_turn_ends() -> None:
    with TestClient(realtime_app(stt={"token_ms": 50, "steps": 4})) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            ws.receive_json()
            # speech, a pause the speech goes on after (its early transcript is dropped), speech, the end
            append(ws, tone(400) + tone(300, 0))
            _stt_idle(client)
            append(ws, tone(300) + tone(700, 0))
            heard = until(ws, "conversation.item.input_audio_transcription.completed")[0]
            done = until(ws, "response.done")[0]
            assert done["response"]["status"] == "completed"
            assert leases(client)["stt"] == 0
        # the transcript is of the audio up to the last pause: 1,000 ms of speech and PAUSE_MS of silence
        assert heard["transcript"] == f"fake transcript of {44 + (1000 + PAUSE_MS) * 48} bytes"
        (record,) = client.get("/v1/logs", params={"route": "/v1/realtime"}).json()["records"]
        stages = record["stages_ms"]
        assert stages["transcription_wait_ms"] <= stages["transcription_ms"]  # it began before the commit


def test_no_early_transcription_starts_while_a_dropped_one_still_runs() -> None:
    with TestClient(realtime_app(stt={"token_ms": 50, "steps": 4})) as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?model=chat") as ws:
            ws.receive_json()
            # the second pause comes while the first pause's transcription (200 ms) still runs: no second one
            # queues behind it; the turn is transcribed once it ends, the whole of it
            append(ws, tone(400) + tone(300, 0) + tone(300) + tone(700, 0))
            heard = until(ws, "conversation.item.input_audio_transcription.completed")[0]
            assert until(ws, "response.done")[0]["response"]["status"] == "completed"
    size = int(heard["transcript"].removeprefix("fake transcript of ").removesuffix(" bytes"))
    assert size > 44 + (1000 + PAUSE_MS) * 48  # more than up to the second pause
