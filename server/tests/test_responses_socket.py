"""POST /v1/responses's WebSocket mode against the real server (granian), through the OpenAI SDK's
`responses.connect()` (a real WebSocket client): the same events as the SSE stream, one JSON object per message,
a sequence of responses on one socket continued by `previous_response_id` (stored or not), a prewarm
(`generate: false`, as Codex CLI sends first), errors as the spec's `error` event, and the bearer key checked as on
HTTP."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypnos_server.testing import live_process
from websockets.sync.client import connect

CONFIG = """
[server]
keys = [{ key = "key-a", label = "alice" }, { key = "key-root", label = "root", admin = true }]

[[models]]
id = "fake-chat"
modality = "text_generation"
engine = "fake"

[[models]]
id = "fake-slow"
modality = "text_generation"
engine = "fake"
[models.fake]
tokens = 200
token_ms = 50
"""
ENV = {"HYPNOS_PLUGINS": "fake"}


@pytest.fixture
def base(tmp_path: Path) -> Any:
    path = tmp_path / "hypnos.toml"
    path.write_text(CONFIG)
    with live_process(path, env=ENV, ready_timeout=60) as (_, url):
        yield url


def until_done(connection: Any) -> list[Any]:
    """The events of one response, to its terminal event (or an error)."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError("the socket closed before the response ended")


def test_responses_run_one_after_another_on_one_socket(base: str) -> None:
    api = openai.OpenAI(base_url=f"{base}/v1", api_key="key-a", max_retries=0, timeout=60)
    streamed = [event.type for event in api.responses.create(model="fake-chat", input="one two", stream=True)]
    with api.responses.connect() as connection:
        connection.response.create(model="fake-chat", input="one", store=False, generate=False)  # Codex's prewarm
        warm = until_done(connection)
        assert [event.type for event in warm] == ["response.created", "response.completed"]
        assert warm[-1].response.output == [] and warm[-1].response.usage.output_tokens == 0
        connection.response.create(
            model="fake-chat", input="two", store=False, previous_response_id=warm[-1].response.id
        )
        assert until_done(connection)[-1].response.usage.input_tokens == 2  # "one" came along: "one\ntwo"
        connection.response.create(model="fake-chat", input="one two", store=False)
        first = until_done(connection)
        assert [event.type for event in first] == streamed  # the same events as the SSE stream
        assert [event.sequence_number for event in first] == list(range(len(first)))
        done = first[-1].response
        assert done.status == "completed" and done.output_text and done.store is False

        connection.response.create(model="fake-chat", input="three", previous_response_id=done.id, store=False)
        second = until_done(connection)[-1].response
        assert second.status == "completed" and second.previous_response_id == done.id
        assert second.usage.input_tokens > done.usage.input_tokens + done.usage.output_tokens  # the history came

        connection.response.create(model="fake-chat", input="x", previous_response_id="resp_unknown")
        error = until_done(connection)[-1]
        assert error.type == "error" and error.status == 404
        assert error.error.code == "previous_response_not_found"

        connection.response.create(model="fake-chat", input="still open")
        stored = until_done(connection)[-1].response
    assert api.responses.retrieve(stored.id).output_text == stored.output_text  # stored as over HTTP


def test_the_socket_needs_the_key_and_each_message_is_one_event(base: str) -> None:
    url = base.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": "Bearer wrong"}) as refused:
        event = json.loads(refused.recv(timeout=30))
        assert event["type"] == "error" and event["status"] == 401
    with connect(url, additional_headers={"Authorization": "Bearer key-a"}) as socket:
        socket.send(json.dumps({"type": "response.cancel"}))
        assert json.loads(socket.recv(timeout=30))["error"]["code"] == "unknown_event_type"
        socket.send(json.dumps({"type": "response.create", "model": "fake-chat", "input": "x", "background": True}))
        assert json.loads(socket.recv(timeout=30))["error"]["param"] == "background"
        socket.send(json.dumps({"type": "response.create", "model": "fake-chat", "input": "hi", "stream": True}))
        kinds = []
        while not kinds or kinds[-1] != "response.completed":
            kinds.append(json.loads(socket.recv(timeout=30))["type"])  # one JSON object per message
        assert kinds[0] == "response.created" and "response.output_text.delta" in kinds


def test_a_client_that_closes_mid_response_is_a_499_not_a_server_failure(base: str) -> None:
    """The socket closed while its response streams: the request log has it as the client's leaving (499, warn), as
    over HTTP, not as a 500 with a traceback (seen with the OpenAI Agents SDK's WebSocket transport)."""
    url = base.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": "Bearer key-a"}) as socket:
        socket.send(json.dumps({"type": "response.create", "model": "fake-slow", "input": "count", "store": False}))
        while json.loads(socket.recv(timeout=30))["type"] != "response.output_text.delta":
            pass
    headers = {"Authorization": "Bearer key-a"}
    for _ in range(100):
        records = httpx.get(f"{base}/v1/logs", headers=headers, timeout=30).json()["records"]
        mine = [record for record in records if record.get("model") == "fake-slow"]
        if mine:
            break
        time.sleep(0.1)
    assert [(record["status"], record["error"], record["level"]) for record in mine] == [
        (499, "the client went away", "warn")
    ]


def test_at_trace_the_request_log_keeps_each_responses_message_and_events(base: str) -> None:
    """A response over the socket is a record of its own in GET /v1/logs, and at trace it carries the client's
    `response.create` message and the events sent back, one per line, as an HTTP request carries its bodies (Codex
    CLI's turns over the socket were records without either)."""
    root = {"Authorization": "Bearer key-root"}
    assert httpx.post(f"{base}/v1/logs/level", json={"level": "trace"}, headers=root, timeout=30).status_code == 200
    url = base.replace("http://", "ws://") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": "Bearer key-a"}) as socket:
        for generate in (False, True):  # Codex's prewarm, then a response
            create = {"type": "response.create", "model": "fake-chat", "input": "sesame", "generate": generate}
            socket.send(json.dumps(create))
            while json.loads(socket.recv(timeout=30))["type"] != "response.completed":
                pass
    for _ in range(100):
        records = httpx.get(f"{base}/v1/logs", params={"model": "fake-chat"}, headers=root, timeout=30).json()
        if len(records["records"]) == 2:
            break
        time.sleep(0.1)
    kinds = []
    for record in records["records"]:
        assert (record["method"], record["route"], record["status"]) == ("GET", "/v1/responses", 200)
        assert json.loads(record["request_payload"])["input"] == "sesame"
        events = [json.loads(line)["type"] for line in record["response_payload"].split("\n")[:-1]]
        assert events[0] == "response.created" and events[-1] == "response.completed"
        kinds.append("response.output_text.delta" in events)
    assert sorted(kinds) == [False, True]  # the prewarm wrote nothing, the response its text
