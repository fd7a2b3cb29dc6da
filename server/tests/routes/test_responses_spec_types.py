"""Responses checked with the Open Responses specification's own published types (`openresponses-types`, pydantic
models generated from the spec's OpenAPI), in strict JSON mode: every response object (whole, stored, incomplete,
failed, each streamed event's, with each request field that the response echoes set), every streamed event over SSE
and the WebSocket (text, thoughts and function calls), the WebSocket's error event and the compact route's
resource. The spec's compliance suite (openresponses.org) validates
with the same schemas; test_responses_conformance.py checks the required fields from a copy of the spec."""

from __future__ import annotations

import enum
import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openresponses_types.types as spec
import pytest
from hypnos_server.app import HypnosApp
from litestar.testing import TestClient
from pydantic import BaseModel, TypeAdapter, ValidationError
from server_kit import ScriptedPlugin, build_app, config, scripted_model, wait_ready

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
}
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
# request fields the response echoes or that shape its output, each sent on its own (the json_schema text format is
# left to test_responses_conformance.py: openresponses-types 2.4.0 types its `schema` as null, the spec object | null)
SENT: list[dict[str, Any]] = [
    {"instructions": "Be brief."},
    {"text": {"format": {"type": "json_object"}, "verbosity": "low"}},
    {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}},
    {
        "tools": [WEATHER],
        "tool_choice": {
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "function", "name": "get_weather"}],
        },
    },
    {"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False, "max_tool_calls": 2},
    {
        "truncation": "auto",
        "metadata": {"k": "v"},
        "top_logprobs": 2,
        "store": False,
        "safety_identifier": "s",
        "prompt_cache_key": "p",
    },
    {"temperature": 0.2, "top_p": 0.5, "presence_penalty": 0.1, "frequency_penalty": 0.2, "service_tier": "auto"},
    {"reasoning": {"effort": "high", "summary": "detailed"}, "include": ["reasoning.encrypted_content"]},
    {
        "tools": [
            WEATHER,
            {"type": "web_search"},
            {"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "function", "name": "f"}]},
        ]
    },
    {
        "input": [
            {"type": "message", "role": "developer", "content": "dev"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ]
    },
    {
        "input": [
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "tools": [WEATHER],
    },
]


def spec_events() -> dict[str, type[BaseModel]]:
    """The spec's streaming event types, by their `type` value."""
    events: dict[str, type[BaseModel]] = {}
    for name in dir(spec):
        model = getattr(spec, name)
        if isinstance(model, type) and issubclass(model, BaseModel) and name.endswith("StreamingEvent"):
            kind = model.model_fields["type"].annotation
            values = [member.value for member in kind] if isinstance(kind, enum.EnumMeta) else typing.get_args(kind)
            events.update((value, model) for value in values)
    return events


EVENTS = spec_events()


def violations(schema: Any, value: Any) -> list[str]:
    """Where `value` breaks the spec's `schema` (strict: no coercion), as `path: message` lines."""
    try:
        TypeAdapter(schema).validate_json(json.dumps(value), strict=True)
    except ValidationError as error:
        return [f"{'.'.join(map(str, issue['loc']))}: {issue['msg']}" for issue in error.errors()]
    return []


def event_violations(events: list[dict[str, Any]]) -> list[str]:
    """Each event that is no spec event or breaks its schema, and each embedded response that breaks its own."""
    found = []
    for index, event in enumerate(events):
        model = EVENTS.get(event.get("type", ""))
        if model is None:
            found.append(f"event {index}: {event.get('type')!r} is no event of the spec")
            continue
        found += [f"event {index} {event['type']}: {line}" for line in violations(model, event)]
        if "response" in event:
            found += [
                f"event {index} response: {line}" for line in violations(spec.ResponseResource, event["response"])
            ]
    return found


def sse(text: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body (without the final `[DONE]`)."""
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[HypnosApp]]:
    raw = config(server={"data_dir": str(tmp_path / "data")})
    raw["models"] += [
        scripted_model("caller", tools=["get_weather"], finish="tool_calls"),
        scripted_model("broken", content=["Hi"], fail=True),
        scripted_model("thinker", reasoning=["hmm,", " ok"], content=["Hi"]),
    ]
    with TestClient(build_app(raw, plugins=[ScriptedPlugin()])) as test_client:
        wait_ready(test_client)
        yield test_client


def test_the_spec_types_catch_what_breaks_the_spec() -> None:
    assert {"response.output_text.delta", "response.function_call_arguments.done", "error"} <= EVENTS.keys()
    assert violations(spec.ResponseResource, {"object": "response"})  # required fields missing
    wrong = {"type": "response.output_text.delta", "sequence_number": "1", "item_id": "m", "output_index": 0}
    assert any(
        line.startswith("event 0 response.output_text.delta: sequence_number") for line in event_violations([wrong])
    )
    assert event_violations([{"type": "response.made_up"}]) == ["event 0: 'response.made_up' is no event of the spec"]


@pytest.mark.parametrize(
    ("model", "extra"), [("fake-chat", {}), ("fake-chat", {"max_output_tokens": 2}), ("caller", {"tools": [WEATHER]})]
)
def test_whole_stored_and_streamed_responses_match_the_spec_types(
    client: TestClient[HypnosApp], model: str, extra: dict[str, Any]
) -> None:
    body = {"model": model, "input": "What's the weather like in San Francisco?", **extra}
    whole = client.post("/v1/responses", json=body)
    assert whole.status_code == 200, whole.text
    assert violations(spec.ResponseResource, whole.json()) == []
    assert violations(spec.ResponseResource, client.get(f"/v1/responses/{whole.json()['id']}").json()) == []
    events = sse(client.post("/v1/responses", json={**body, "stream": True}).text)
    assert events[-1]["type"] in TERMINAL and event_violations(events) == []
    if model == "caller":
        kinds = {event["type"] for event in events}
        assert {"response.function_call_arguments.delta", "response.function_call_arguments.done"} <= kinds
        assert [item["type"] for item in events[-1]["response"]["output"]] == ["function_call"]


def test_a_failed_response_and_the_compact_resource_match_the_spec_types(client: TestClient[HypnosApp]) -> None:
    events = sse(client.post("/v1/responses", json={"model": "broken", "input": "x", "stream": True}).text)
    assert events[-1]["type"] == "response.failed" and event_violations(events) == []
    history = [{"role": "user", "content": "My name is Bob."}, {"role": "assistant", "content": "Hello Bob."}]
    compacted = client.post("/v1/responses/compact", json={"model": "fake-chat", "input": history})
    assert compacted.status_code == 200, compacted.text
    assert violations(spec.CompactResource, compacted.json()) == []


def test_websocket_events_and_errors_match_the_spec_types(client: TestClient[HypnosApp]) -> None:
    with client.websocket_connect("/v1/responses") as socket:
        for model, extra in (("fake-chat", {}), ("caller", {"tools": [WEATHER]})):
            socket.send_json({"type": "response.create", "model": model, "input": "weather in Oslo?", **extra})
            events = [socket.receive_json()]
            while events[-1]["type"] not in TERMINAL:
                events.append(socket.receive_json())
            assert events[-1]["type"] == "response.completed" and event_violations(events) == []
        socket.send_json({"type": "response.create", "model": "no-such-model", "input": "x"})
        error = socket.receive_json()
        assert error["type"] == "error" and error["status"] == 404
        assert violations(spec.WebSocketErrorEvent, error) == []


def test_thoughts_stream_as_the_summary_asked_for_and_else_as_reasoning_text(client: TestClient[HypnosApp]) -> None:
    body = {"model": "thinker", "input": "x", "stream": True, "reasoning": {"effort": "low", "summary": "auto"}}
    events = sse(client.post("/v1/responses", json=body).text)
    assert event_violations(events) == []
    deltas = [event["delta"] for event in events if event["type"] == "response.reasoning_summary_text.delta"]
    reasoning = events[-1]["response"]["output"][0]
    assert "".join(deltas) == reasoning["summary"][0]["text"] == reasoning["content"][0]["text"] == "hmm, ok"
    # without a summary the thoughts are OpenAI's reasoning_text events, the one kind the spec names otherwise
    events = sse(client.post("/v1/responses", json={**body, "reasoning": {"effort": "low"}}).text)
    deltas = [event["delta"] for event in events if event["type"] == "response.reasoning_text.delta"]
    assert "".join(deltas) == "hmm, ok" and events[-1]["response"]["output"][0]["summary"] == []
    assert {line.split(": ")[1] for line in event_violations(events)} == {
        "'response.reasoning_text.delta' is no event of the spec",
        "'response.reasoning_text.done' is no event of the spec",
    }


@pytest.mark.parametrize("sent", SENT, ids=lambda sent: ",".join(sent))
def test_what_a_request_sets_is_echoed_in_the_spec_types(client: TestClient[HypnosApp], sent: dict[str, Any]) -> None:
    for model in ("fake-chat", "caller", "thinker"):
        body = {"model": model, "input": "weather in Oslo?", **sent}
        whole = client.post("/v1/responses", json=body)
        assert whole.status_code == 200, whole.text
        assert violations(spec.ResponseResource, whole.json()) == [], model
        events = sse(client.post("/v1/responses", json={**body, "stream": True}).text)
        assert [line for line in event_violations(events) if "reasoning_text" not in line] == [], model
