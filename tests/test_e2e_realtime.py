"""End to end: the OpenAI SDK's realtime client against a real `hypnos serve` (granian) over fake models, and what a
hostile client does to it (a 10 MB frame, a frame over the bound, a client that never reads)."""

from __future__ import annotations

import base64
import json
import math
import os
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import websockets  # the SDK's realtime client needs openai[realtime]: the e2e session installs it
from hypnos_server.testing import live_process
from websockets.sync.client import connect

API_KEY = "e2e-realtime-key"
MiB = 1024 * 1024
CONFIG = """
[limits]
max_realtime_pending_bytes = 1048576

[[models]]
id = "fake-chat"
modality = "text_generation"
engine = "fake"

[[models]]
id = "fake-long"
modality = "text_generation"
engine = "fake"
[models.fake]
tokens = 8000

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
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The real server (its process and base URL) with the fake engines and an API key."""
    config = tmp_path_factory.mktemp("e2e-realtime") / "hypnos.toml"
    config.write_text(CONFIG)
    env = {"HYPNOS_API_KEYS": API_KEY, "HYPNOS_PLUGINS": "fake"}
    with live_process(config, env=env, ready_timeout=60) as (process, base):
        yield process, base


@pytest.fixture(scope="module")
def server(served: tuple[subprocess.Popen[bytes], str]) -> str:
    """The served base URL."""
    return served[1]


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


def test_sdk_ga_client_reads_item_done_rate_limits_and_output_modalities(server: str) -> None:
    from openai.types.realtime import ConversationItemDone, RateLimitsUpdatedEvent, ResponseDoneEvent

    client = openai.OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0)
    with client.realtime.connect(model="fake-chat") as connection:
        connection.recv()
        session = {"type": "realtime", "output_modalities": ["text"], "audio": {"input": {"turn_detection": None}}}
        connection.session.update(session=session)  # type: ignore[arg-type]
        connection.recv()
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        connection.conversation.item.create(item=item)  # type: ignore[arg-type]
        connection.response.create()
        events = _until_done(connection)
        done = [e for e in events if isinstance(e, ConversationItemDone)]
        assert [e.item.role for e in done] == ["user", "assistant"]  # type: ignore[union-attr]
        assert all(e.item.status == "completed" for e in done)  # type: ignore[union-attr]
        assert any(isinstance(e, RateLimitsUpdatedEvent) for e in events)
        finished = events[-1]
        assert isinstance(finished, ResponseDoneEvent) and finished.response.output_modalities == ["text"]
        assert finished.response.conversation_id and finished.response.status == "completed"


def test_sdk_beta_client_reads_conversation_created(server: str) -> None:
    from openai.types.beta.realtime import ConversationCreatedEvent

    # the beta client builds wss:// from base_url; a plain ws:// server is named as its websocket_base_url
    socket_url = server.replace("http://", "ws://") + "/v1"
    client = openai.OpenAI(base_url=f"{server}/v1", websocket_base_url=socket_url, api_key=API_KEY, max_retries=0)
    with client.beta.realtime.connect(model="fake-chat") as connection:
        assert connection.recv().type == "session.created"
        created = connection.recv()
        assert isinstance(created, ConversationCreatedEvent) and created.conversation.id
        connection.session.update(session={"modalities": ["text"], "turn_detection": None})
        connection.recv()
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        connection.conversation.item.create(item=item)  # type: ignore[arg-type]
        connection.response.create()
        events = _until_done(connection)
        assert "conversation.item.done" not in [e.type for e in events]
        assert events[-1].response.modalities == ["text"]  # type: ignore[union-attr]


def test_sdk_realtime_wrong_key_is_refused(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="wrong", max_retries=0)
    with client.realtime.connect(model="fake-chat") as connection:
        event = connection.recv()
        assert event.type == "error" and event.error.code == "invalid_api_key"


def _socket(server: str, model: str = "fake-chat", **options: Any) -> Any:
    url = server.replace("http://", "ws://") + f"/v1/realtime?model={model}"
    return connect(url, additional_headers={"Authorization": f"Bearer {API_KEY}"}, max_size=None, **options)


def _admin(server: str) -> httpx.Client:
    return httpx.Client(base_url=server, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)


def test_a_10_mb_frame_is_an_error_event_and_one_over_the_bound_closes_1009(server: str) -> None:
    with _socket(server) as ws:
        assert json.loads(ws.recv())["type"] == "session.created"
        ws.send("x" * (10 * MiB))  # under limits.max_realtime_frame_bytes (15 MiB): read, and refused as not JSON
        assert json.loads(ws.recv())["error"]["code"] == "invalid_json"
        ws.send(json.dumps({"type": "session.update", "session": {"instructions": "Still here."}}))
        assert json.loads(ws.recv())["session"]["instructions"] == "Still here."
        ws.send("y" * (16 * MiB))
        assert json.loads(ws.recv())["error"]["code"] == "frame_too_large"
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    with _admin(server) as admin:
        assert all(m["active_leases"] == 0 for m in admin.get("/v1/memory/status").json()["models"])


def _worker_rss(server_pid: int) -> int:
    """Resident bytes of the server's worker processes (granian's children)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == server_pid:
                pages = int(Path(f"/proc/{entry}/statm").read_text().split()[1])
                total += pages * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total


def _sessions_open(admin: httpx.Client) -> float:
    line = next(
        line for line in admin.get("/metrics").text.splitlines() if line.startswith("hypnos_realtime_sessions_open")
    )
    return float(line.split()[-1])


def test_a_client_that_never_reads_is_dropped_with_memory_bounded_and_no_lease_held(
    served: tuple[subprocess.Popen[bytes], str],
) -> None:
    process, server = served
    before = _worker_rss(process.pid)
    # an 8,000-word answer is about 51 MB of audio events; the client takes none of them
    ws = _socket(server, "fake-long", max_queue=1)
    try:
        ws.send(json.dumps({"type": "session.update", "session": {"max_response_output_tokens": 8000}}))
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Talk for long."}]}
        ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        ws.send(json.dumps({"type": "response.create"}))
        with _admin(server) as admin:
            for _ in range(600):  # the server ends the session itself: the client never reads nor closes
                if _sessions_open(admin) == 0:
                    break
                time.sleep(0.1)
            assert _sessions_open(admin) == 0
            assert all(m["active_leases"] == 0 for m in admin.get("/v1/memory/status").json()["models"])
            (record,) = admin.get("/v1/logs", params={"route": "/v1/realtime", "model": "fake-long"}).json()["records"]
            assert record["status"] == 499  # the response was cancelled with its session
        assert _worker_rss(process.pid) - before < 32 * MiB  # the server kept at most its 1 MiB of pending events
    finally:
        ws.close()
