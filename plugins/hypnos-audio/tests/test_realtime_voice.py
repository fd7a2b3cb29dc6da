"""/v1/realtime over the starter whisper and Piper (a fake chat model): a spoken question, heard and answered aloud,
its turn found by Silero VAD, which ignores the loud noise the energy gate takes for speech."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest
from hypnos.testing.speech_text import word_error_rate
from hypnos_audio import plugin
from hypnos_server.realtime.vad import EnergyDetector, TurnSegmenter

from .test_server import STEADY_VOICE, TEXT, client  # noqa: F401  (the module's client fixture: starter speech models, fake chat)

pytestmark = pytest.mark.model

RATE = 24000
NOISE_MS = 1000


@pytest.fixture(scope="module")
def question(client: Any) -> bytes:  # noqa: F811
    """TEXT spoken by the noiseless Piper, pcm16 24 kHz (the same samples every run)."""
    spoken = client.post(
        "/v1/audio/speech", json={"model": STEADY_VOICE, "input": TEXT, "voice": "alloy", "response_format": "pcm"}
    )
    assert spoken.status_code == 200
    return spoken.content


def loud_noise(ms: int) -> bytes:
    """White noise at about -13 dBFS RMS: far above the energy gate's -40 dBFS, and not speech."""
    rng = np.random.default_rng(7)
    samples = (rng.standard_normal(RATE * ms // 1000) * 0.22).clip(-1, 1)
    return (samples * 32767).astype("<i2").tobytes()


def silence(ms: int) -> bytes:
    """Digital silence, pcm16 24 kHz."""
    return bytes(RATE * ms // 1000 * 2)


def _turns(detector: Any, pcm: bytes) -> list[tuple[str, int]]:
    """The turns' starts and stops (not the pauses within them) the detector finds, fed 20 ms at a time."""
    segmenter = TurnSegmenter(detector, RATE, silence_ms=500)
    events = []
    for offset in range(0, len(pcm), RATE * 2 * 20 // 1000):
        events += segmenter.feed(pcm[offset : offset + RATE * 2 * 20 // 1000])
    return [(event.kind, event.at_ms) for event in events if event.kind in {"started", "stopped"}]


def test_silero_hears_the_speech_and_not_the_noise_the_energy_gate_takes_for_speech(question: bytes) -> None:
    (silero,) = plugin.hypnos_speech_detectors()
    assert silero.name == "silero" and silero.blocking
    pcm = silence(500) + loud_noise(NOISE_MS) + silence(500) + question + silence(1000)
    speech_from = 500 + NOISE_MS + 500
    speech_to = speech_from + len(question) * 1000 // (2 * RATE)
    heard = _turns(silero.new(0.5), pcm)
    assert [kind for kind, _ in heard] == ["started", "stopped"], heard
    assert speech_from - 100 <= heard[0][1] <= speech_from + 500
    assert speech_to <= heard[1][1] <= speech_to + 1000
    gated = _turns(EnergyDetector(0.5), pcm)
    assert gated[0][0] == "started" and gated[0][1] < 500 + NOISE_MS, gated  # the noise was a turn to it
    assert _turns(silero.new(0.5), silence(500) + loud_noise(2000) + silence(500)) == []


def _events_until(ws: Any, kind: str) -> list[dict[str, Any]]:
    events = []
    while True:
        events.append(ws.receive_json())
        if events[-1]["type"] == kind:
            return events


def test_a_spoken_question_is_heard_answered_and_spoken_back(client: Any, question: bytes) -> None:  # noqa: F811
    pcm = loud_noise(NOISE_MS) + question + silence(1000)  # the noise is no turn; the second of silence ends one
    with client.websocket_connect("/v1/realtime?model=fake-chat") as ws:
        created = ws.receive_json()
        assert created["session"]["hypnos"]["speech_detector"] == "silero"  # the plugin's model is the default
        hypnos = {"transcription_model": "whisper-tiny.en", "speech_model": STEADY_VOICE}
        ws.send_json({"type": "session.update", "session": {"hypnos": hypnos}})
        ws.receive_json()
        step = 24000 * 2 * 20 // 1000  # 20 ms frames
        for offset in range(0, len(pcm), step):
            chunk = base64.b64encode(pcm[offset : offset + step]).decode()
            ws.send_json({"type": "input_audio_buffer.append", "audio": chunk})
        events = _events_until(ws, "response.done")
    kinds = [event["type"] for event in events]
    assert kinds.count("input_audio_buffer.speech_started") == 1 and "input_audio_buffer.speech_stopped" in kinds
    started = next(e for e in events if e["type"] == "input_audio_buffer.speech_started")
    assert started["audio_start_ms"] >= NOISE_MS - 300 - 100  # at the speech, less the prefix padding
    heard = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert word_error_rate(TEXT, heard["transcript"]) <= 0.2, heard["transcript"]
    answer = "".join(e["delta"] for e in events if e["type"] == "response.audio_transcript.delta")
    audio = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.audio.delta")
    assert events[-1]["response"]["status"] == "completed" and answer and len(audio) > 24000
    # the client got the answer's speech whole: the very samples the noiseless voice gives for that text
    # (the fake answer is a string of NATO words, which whisper tiny mishears too often to compare transcripts)
    body = {"model": STEADY_VOICE, "input": answer, "voice": "alloy", "response_format": "pcm"}
    spoken = client.post("/v1/audio/speech", json=body)
    assert spoken.status_code == 200 and audio == spoken.content, (len(audio), len(spoken.content))
