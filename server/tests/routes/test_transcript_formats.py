"""POST /v1/audio/transcriptions response_format: json, text, srt, vtt, verbose_json (OpenAI's shapes)."""

from __future__ import annotations

import pytest
from hypnos.engine import TranscriptionResult, TranscriptionSegment
from hypnos.kit.audio import wav_header
from hypnos_server.transcripts import plain_body, verbose
from server_kit import error_of

CLIP = wav_header(32000 * 2, 16000) + b"\x00\x00" * 32000  # two seconds of silence
TRANSCRIPT = f"fake transcript of {len(CLIP)} bytes"


def transcribe(client, fmt: str | None, **fields: str):
    data = {"model": "fake-chat", **fields} | ({"response_format": fmt} if fmt is not None else {})
    return client.post("/v1/audio/transcriptions", files={"file": ("clip.wav", CLIP, "audio/wav")}, data=data)


def test_json_is_the_default(client):
    response = transcribe(client, None)
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["text"] == TRANSCRIPT
    explicit = transcribe(client, "json").json()
    assert set(response.json()) == set(explicit) == {"text", "duration_secs", "hypnos_telemetry"}
    assert explicit["text"] == TRANSCRIPT


def test_text_is_the_plain_transcript(client):
    response = transcribe(client, "text")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == TRANSCRIPT + "\n"
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert float(response.headers["x-hypnos-audio-secs"]) == 2.0


def test_srt_is_one_cue_over_the_clip(client):
    response = transcribe(client, "srt")
    assert response.status_code == 200
    assert response.text == f"1\n00:00:00,000 --> 00:00:02,000\n{TRANSCRIPT}\n"


def test_vtt_is_one_cue_over_the_clip(client):
    response = transcribe(client, "vtt")
    assert response.headers["content-type"].startswith("text/vtt")
    assert response.text == f"WEBVTT\n\n00:00:00.000 --> 00:00:02.000\n{TRANSCRIPT}\n"


def test_verbose_json_has_segments_language_and_duration(client):
    body = transcribe(client, "verbose_json", language="en").json()
    assert body["task"] == "transcribe"
    assert body["language"] == "en"
    assert body["duration"] == 2.0
    assert body["text"] == TRANSCRIPT
    assert body["segments"] == [{"id": 0, "start": 0.0, "end": 2.0, "text": TRANSCRIPT}]


def test_json_body_takes_response_format(client):
    response = client.post(
        "/v1/audio/transcriptions", json={"model": "fake-chat", "audio_bytes": list(CLIP), "response_format": "text"}
    )
    assert response.text == TRANSCRIPT + "\n"


@pytest.mark.parametrize("fmt", ["xml", "JSON", "mp3"])
def test_unknown_format_is_400(client, fmt):
    response = transcribe(client, fmt)
    assert response.status_code == 400
    assert "response_format" in error_of(response)["message"]


def test_engine_segments_become_cues():
    result = TranscriptionResult(
        text="Hello there. General Kenobi.",
        segments=[
            TranscriptionSegment(start=0.0, end=1.5, text=" Hello there."),
            TranscriptionSegment(start=61.25, end=3723.004, text=" General Kenobi."),
        ],
        language="en",
    )
    assert plain_body("srt", result, 3724.0) == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n00:01:01,250 --> 01:02:03,004\nGeneral Kenobi.\n"
    )
    assert plain_body("vtt", result, 3724.0).splitlines()[5] == "00:01:01.250 --> 01:02:03.004"
    body = verbose(result, 3724.0, result.language)
    assert [s["start"] for s in body["segments"]] == [0.0, 61.25]
    assert body["language"] == "en" and body["duration"] == 3724.0
