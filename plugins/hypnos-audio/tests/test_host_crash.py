"""kill -9 of a Kokoro or a whisper engine host during a request (real server, starter models): the request gets
the spec's 500 error body, and the next request starts a new host and is served."""

from __future__ import annotations

import httpx
import pytest
from hypnos.testing.hosts import kill_host_during, status_entry

pytestmark = pytest.mark.model

SENTENCE = "Please bring the blue umbrella tomorrow morning, because the train leaves the station at seven o'clock."
LONG_TEXT = f"{SENTENCE} {SENTENCE}"  # some 12 s of speech: a second or more of work for either engine


def speak(base: str, text: str) -> httpx.Response:
    body = {"model": "kokoro-82m", "input": text, "voice": "alloy"}
    return httpx.post(f"{base}/v1/audio/speech", json=body, timeout=300)


def transcribe(base: str, wav: bytes) -> httpx.Response:
    files = {"file": ("speech.wav", wav, "audio/wav")}
    data = {"model": "whisper-tiny.en", "language": "en"}
    return httpx.post(f"{base}/v1/audio/transcriptions", files=files, data=data, timeout=300)


def assert_killed(base: str, model_id: str, pid: int, answer: httpx.Response) -> None:
    """The request failed with the spec's error body naming the kill; the model dropped to tier 3."""
    assert answer.status_code == 500, answer.text
    error = answer.json()["error"]
    assert error["type"] == "server_error" and "SIGKILL" in error["message"]
    entry = status_entry(base, model_id)
    assert entry["engine_process"] is None, entry  # the dead host is gone; nothing restarts it before a request
    assert entry["active_leases"] == 0


def test_a_killed_kokoro_host_fails_its_speech_and_the_next_one_is_spoken(audio_server: str) -> None:
    assert speak(audio_server, "Good morning.").status_code == 200  # the host is up and loaded
    pid, answer = kill_host_during(audio_server, "kokoro-82m", lambda: speak(audio_server, LONG_TEXT))
    assert_killed(audio_server, "kokoro-82m", pid, answer)
    again = speak(audio_server, "Good morning.")
    assert again.status_code == 200 and again.content[:4] == b"RIFF" and len(again.content) > 10_000
    assert status_entry(audio_server, "kokoro-82m")["engine_process"]["pid"] != pid


def test_a_killed_whisper_host_fails_its_transcription_and_the_next_one_is_heard(audio_server: str) -> None:
    speech, short = speak(audio_server, LONG_TEXT), speak(audio_server, "Good morning.")
    assert speech.status_code == 200 and short.status_code == 200
    assert transcribe(audio_server, short.content).status_code == 200  # the host is up and loaded
    pid, answer = kill_host_during(audio_server, "whisper-tiny.en", lambda: transcribe(audio_server, speech.content))
    assert_killed(audio_server, "whisper-tiny.en", pid, answer)
    again = transcribe(audio_server, short.content)
    assert again.status_code == 200 and "morning" in again.json()["text"].lower()
    assert status_entry(audio_server, "whisper-tiny.en")["engine_process"]["pid"] != pid
