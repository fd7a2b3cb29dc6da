"""End to end: the OpenAI SDK's realtime client against a real `hypnos serve` (granian) over fake models."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import websockets  # noqa: F401  the SDK's realtime client needs openai[realtime]: the e2e session installs it
from hypnos_server.testing import live_server

API_KEY = "e2e-realtime-key"
CONFIG = """
[[models]]
id = "fake-chat"
modality = "text_generation"
engine = "fake"

[[models]]
id = "fake-stt"
modality = "speech_to_text"
engine = "fake"

[[models]]
id = "fake-tts"
modality = "text_to_speech"
engine = "fake"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real server with the fake engines and an API key."""
    config = tmp_path_factory.mktemp("e2e-realtime") / "hypnos.toml"
    config.write_text(CONFIG)
    with live_server(config, env={"HYPNOS_API_KEYS": API_KEY, "HYPNOS_PLUGINS": "fake"}, ready_timeout=60) as base:
        yield base


def _speech(ms: int) -> str:
    samples = 24000 * ms // 1000
    pcm = b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 300 * i / 24000))) for i in range(samples))
    return base64.b64encode(pcm).decode()


def _until_done(connection: Any) -> list[Any]:
    events = []
    for event in connection:
        events.append(event)
        if event.type == "response.done":
            return events
    raise AssertionError("the connection closed before response.done")


def test_sdk_realtime_turn_with_audio_and_a_tool(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0)
    tool = {"type": "function", "name": "lookup", "description": "Look up", "parameters": {"type": "object"}}
    with client.realtime.connect(model="fake-chat") as connection:
        assert connection.recv().type == "session.created"
        connection.session.update(
            session={"type": "realtime", "output_modalities": ["audio"], "audio": {"input": {"turn_detection": None}}}
        )
        assert connection.recv().type == "session.updated"
        connection.input_audio_buffer.append(audio=_speech(400))
        connection.input_audio_buffer.commit()
        connection.response.create()
        events = _until_done(connection)
        kinds = [event.type for event in events]
        transcript = next(e for e in events if e.type == "conversation.item.input_audio_transcription.completed")
        assert transcript.transcript == "fake transcript of 19244 bytes"  # 400 ms of pcm16 in a WAV
        assert "response.output_audio_transcript.delta" in kinds
        audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
        assert len(audio) > 0 and len(audio) % 2 == 0
        assert events[-1].response.status == "completed"
        assert events[-1].response.usage.output_tokens > 0

        connection.session.update(session={"type": "realtime", "tools": [tool]})
        connection.recv()
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]}
        connection.conversation.item.create(item=item)  # type: ignore[arg-type]
        connection.response.create()
        events = _until_done(connection)
        call = next(e for e in events if e.type == "response.function_call_arguments.done")
        assert call.name == "lookup" and call.arguments == '{"query":"weather?"}'
        output = {"type": "function_call_output", "call_id": call.call_id, "output": '{"sunny": true}'}
        connection.conversation.item.create(item=output)  # type: ignore[arg-type]
        connection.response.create()
        events = _until_done(connection)
        assert events[-1].response.status == "completed"
        assert any(e.type == "response.output_audio.delta" for e in events)


def test_sdk_realtime_wrong_key_is_refused(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="wrong", max_retries=0)
    with client.realtime.connect(model="fake-chat") as connection:
        event = connection.recv()
        assert event.type == "error" and event.error.code == "invalid_api_key"
