"""Realtime test kit: an app with fake chat, transcription and speech models, audio to send, events to read."""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

from server_kit import build_app

RATE = 24000


def realtime_config(
    chat: dict[str, Any] | None = None, stt: dict[str, Any] | None = None, **sections: Any
) -> dict[str, Any]:
    """Three fake models (chat, stt, tts); `chat` and `stt`: their `[models.fake]` tables."""
    chat_model: dict[str, Any] = {"id": "chat", "modality": "text_generation", "engine": "fake"}
    if chat:
        chat_model["fake"] = chat
    models = [
        chat_model,
        {"id": "stt", "modality": "speech_to_text", "engine": "fake", **({"fake": stt} if stt else {})},
        {"id": "tts", "modality": "text_to_speech", "engine": "fake"},
    ]
    return {"models": models, **sections}


def realtime_app(
    chat: dict[str, Any] | None = None,
    stt: dict[str, Any] | None = None,
    plugins: list[object] | None = None,
    **sections: Any,
) -> Any:
    """The app over realtime_config (plus extra plugins)."""
    return build_app(realtime_config(chat, stt, **sections), plugins)


def tone(ms: int, amplitude: int = 8000) -> bytes:
    """A 300 Hz tone (loud enough to be speech to the energy VAD; amplitude 0: silence), pcm16 24 kHz."""
    count = RATE * ms // 1000
    return b"".join(struct.pack("<h", int(amplitude * math.sin(2 * math.pi * 300 * i / RATE))) for i in range(count))


def append(ws: Any, pcm: bytes, chunk_ms: int = 20) -> None:
    """Send audio as input_audio_buffer.append events of chunk_ms each."""
    step = RATE * chunk_ms // 1000 * 2
    for offset in range(0, len(pcm), step):
        ws.send_json(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[offset : offset + step]).decode()}
        )


def until(ws: Any, kind: str, limit: int = 2000) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read events until one of type `kind`; it and every event read on the way (itself included)."""
    seen: list[dict[str, Any]] = []
    for _ in range(limit):
        event = ws.receive_json()
        seen.append(event)
        if event["type"] == kind:
            return event, seen
    raise AssertionError(f"no {kind} in {limit} events: {[e['type'] for e in seen[-20:]]}")


def types(events: list[dict[str, Any]]) -> list[str]:
    """The event types, in order."""
    return [event["type"] for event in events]


def leases(client: Any) -> dict[str, int]:
    """Each model's active leases (GET /v1/memory/status)."""
    return {m["id"]: m["active_leases"] for m in client.get("/v1/memory/status").json()["models"]}
