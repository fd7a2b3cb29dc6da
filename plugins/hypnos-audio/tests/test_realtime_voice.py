"""/v1/realtime over the starter whisper and Piper (a fake chat model): a spoken question, heard and answered aloud."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypnos.kit.audio import wav_bytes

from .speech_text import word_error_rate
from .test_server import TEXT, client  # noqa: F401  (the module's client fixture: starter speech models, fake chat)

pytestmark = pytest.mark.model


def _events_until(ws: Any, kind: str) -> list[dict[str, Any]]:
    events = []
    while True:
        events.append(ws.receive_json())
        if events[-1]["type"] == kind:
            return events


def test_a_spoken_question_is_heard_answered_and_spoken_back(client: Any) -> None:  # noqa: F811
    question = client.post(
        "/v1/audio/speech", json={"model": "piper-joe", "input": TEXT, "voice": "alloy", "response_format": "pcm"}
    )
    assert question.status_code == 200
    silence = bytes(24000 * 2)  # one second: the server VAD's end of turn
    pcm = question.content + silence
    with client.websocket_connect("/v1/realtime?model=fake-chat") as ws:
        ws.receive_json()
        hypnos = {"transcription_model": "whisper-tiny.en", "speech_model": "piper-joe"}
        ws.send_json({"type": "session.update", "session": {"hypnos": hypnos}})
        ws.receive_json()
        step = 24000 * 2 * 20 // 1000  # 20 ms frames
        for offset in range(0, len(pcm), step):
            chunk = base64.b64encode(pcm[offset : offset + step]).decode()
            ws.send_json({"type": "input_audio_buffer.append", "audio": chunk})
        events = _events_until(ws, "response.done")
    kinds = [event["type"] for event in events]
    assert "input_audio_buffer.speech_started" in kinds and "input_audio_buffer.speech_stopped" in kinds
    heard = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert word_error_rate(TEXT, heard["transcript"]) <= 0.2, heard["transcript"]
    answer = "".join(e["delta"] for e in events if e["type"] == "response.audio_transcript.delta")
    audio = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.audio.delta")
    assert events[-1]["response"]["status"] == "completed" and answer and len(audio) > 24000
    wav = wav_bytes(audio, 24000)
    back = client.post(
        "/v1/audio/transcriptions",
        files={"file": ("answer.wav", wav, "audio/wav")},
        data={"model": "whisper-tiny.en", "language": "en"},
    )
    assert back.status_code == 200, back.text
    assert word_error_rate(answer, back.json()["text"]) <= 0.15, (answer, back.json()["text"])
