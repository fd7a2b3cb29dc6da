"""Realtime wire helpers: ids, the error event in OpenAI's shape, and the beta / GA names of server events."""

from __future__ import annotations

import secrets
from typing import Any

# Server events whose name differs between the beta protocol (OpenAI-Beta: realtime=v1) and the GA one.
GA_NAMES = {
    "response.audio.delta": "response.output_audio.delta",
    "response.audio.done": "response.output_audio.done",
    "response.audio_transcript.delta": "response.output_audio_transcript.delta",
    "response.audio_transcript.done": "response.output_audio_transcript.done",
    "response.text.delta": "response.output_text.delta",
    "response.text.done": "response.output_text.done",
    "conversation.item.created": "conversation.item.added",
}


def new_id(prefix: str) -> str:
    """A fresh `<prefix>_<hex>` id (event, item, response, session)."""
    return f"{prefix}_{secrets.token_hex(10)}"


def event_name(name: str, ga: bool) -> str:
    """The name a server event has in the session's dialect."""
    return GA_NAMES.get(name, name) if ga else name


def error_event(
    message: str,
    code: str | None = None,
    kind: str = "invalid_request_error",
    param: str | None = None,
    client_event_id: str | None = None,
) -> dict[str, Any]:
    """An `error` server event: {type, event_id, error: {type, code, message, param, event_id}}."""
    return {
        "type": "error",
        "event_id": new_id("event"),
        "error": {"type": kind, "code": code, "message": message, "param": param, "event_id": client_event_id},
    }


class RealtimeError(Exception):
    """A client event the session refuses; sent back as an `error` event, the session goes on."""

    def __init__(
        self, message: str, code: str = "invalid_value", param: str | None = None, kind: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.kind = kind
