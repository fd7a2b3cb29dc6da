"""The Open Responses specification's ResponseResource, checked on every path a response object takes: whole, each
streamed event that embeds it, background (queued, in progress, cancelled, failed), stored (GET), incomplete.

The required fields and their types below are copied from the specification's OpenAPI (openresponses.org,
components.schemas: ResponseResource and the schemas it refers to), as data, so that the check follows the spec and
not the server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypnos_server.app import HypnosApp
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

ANY = "any"
# schema name -> {required field: the JSON types it may take, or a schema name it must match (with "null" allowed)}
SPEC: dict[str, dict[str, tuple[str, ...]]] = {
    "ResponseResource": {
        "id": ("string",),
        "object": ("string",),
        "created_at": ("integer",),
        "completed_at": ("integer", "null"),
        "status": ("string",),
        "incomplete_details": ("IncompleteDetails", "null"),
        "model": ("string",),
        "previous_response_id": ("string", "null"),
        "instructions": ("string", "array", "null"),
        "output": ("array:ItemField",),
        "error": ("Error", "null"),
        "tools": ("array:FunctionTool",),
        "tool_choice": ("string", "object"),
        "truncation": ("string",),
        "parallel_tool_calls": ("boolean",),
        "text": ("TextField",),
        "top_p": ("number",),
        "presence_penalty": ("number",),
        "frequency_penalty": ("number",),
        "top_logprobs": ("integer",),
        "temperature": ("number",),
        "reasoning": ("Reasoning", "null"),
        "usage": ("Usage", "null"),
        "max_output_tokens": ("integer", "null"),
        "max_tool_calls": ("integer", "null"),
        "store": ("boolean",),
        "background": ("boolean",),
        "service_tier": ("string",),
        "metadata": (ANY,),
        "safety_identifier": ("string", "null"),
        "prompt_cache_key": ("string", "null"),
    },
    "IncompleteDetails": {"reason": ("string",)},
    "Error": {"code": ("string",), "message": ("string",)},
    "FunctionTool": {
        "type": ("string",),
        "name": ("string",),
        "description": ("string", "null"),
        "parameters": ("object", "null"),
        "strict": ("boolean", "null"),
    },
    "TextField": {"format": ("object",)},
    "Reasoning": {"effort": ("string", "null"), "summary": ("string", "null")},
    "Usage": {
        "input_tokens": ("integer",),
        "output_tokens": ("integer",),
        "total_tokens": ("integer",),
        "input_tokens_details": ("InputTokensDetails",),
        "output_tokens_details": ("OutputTokensDetails",),
    },
    "InputTokensDetails": {"cached_tokens": ("integer",)},
    "OutputTokensDetails": {"reasoning_tokens": ("integer",)},
    "Message": {
        "type": ("string",),
        "id": ("string",),
        "status": ("string",),
        "role": ("string",),
        "content": ("array",),
    },
    "FunctionCall": {
        "type": ("string",),
        "id": ("string",),
        "call_id": ("string",),
        "name": ("string",),
        "arguments": ("string",),
        "status": ("string",),
    },
    "ReasoningBody": {"type": ("string",), "id": ("string",), "summary": ("array",)},
    "JsonSchemaResponseFormat": {
        "type": ("string",),
        "name": ("string",),
        "description": ("string", "null"),
        "schema": (ANY,),
        "strict": ("boolean",),
    },
}
ENUMS = {"truncation": {"auto", "disabled"}, "object": {"response"}}
ITEMS = {"message": "Message", "function_call": "FunctionCall", "reasoning": "ReasoningBody"}
TYPES = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
    "null": type(None),
}
SLOW = {"id": "slow-chat", "modality": "text_generation", "engine": "fake", "fake": {"tokens": 400, "token_ms": 20}}
UNDESCRIBED = {"type": "function", "name": "lookup"}  # no description, parameters nor strict: echoed with all three


def _is(value: Any, kind: str) -> bool:
    if kind == ANY:
        return True
    if kind.startswith("array:"):
        return isinstance(value, list)
    if kind in SPEC:
        return isinstance(value, dict)
    python = TYPES[kind]
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, python)


def problems(value: Any, schema: str, where: str = "response") -> list[str]:
    """What in `value` breaks the spec's `schema` (required fields, their types, nested schemas)."""
    found = []
    for name, kinds in SPEC[schema].items():
        if name not in value:
            found.append(f"{where}.{name}: missing")
            continue
        field = value[name]
        match = next((kind for kind in kinds if _is(field, kind)), None)
        if match is None:
            found.append(f"{where}.{name}: {type(field).__name__} is not {' | '.join(kinds)}")
        elif match in SPEC:
            found += problems(field, match, f"{where}.{name}")
        elif match.startswith("array:"):
            for index, element in enumerate(field):
                inner = match[6:]
                if inner == "ItemField":
                    inner = ITEMS.get(element.get("type"), "")
                if inner:
                    found += problems(element, inner, f"{where}.{name}[{index}]")
        if schema == "ResponseResource" and name in ENUMS and field not in ENUMS[name]:
            found.append(f"{where}.{name}: {field!r} is not one of {sorted(ENUMS[name])}")
    if schema == "TextField" and value["format"].get("type") == "json_schema":
        found += problems(value["format"], "JsonSchemaResponseFormat", f"{where}.format")
    return found


def sse(text: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body, which ends with the spec's literal `[DONE]`."""
    data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(payload) for payload in data[:-1]]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[HypnosApp]]:
    raw = config(server={"data_dir": str(tmp_path / "data")})
    raw["models"].append(SLOW)
    with TestClient(build_app(raw)) as test_client:
        wait_ready(test_client)
        yield test_client


def poll(client: TestClient[HypnosApp], response_id: str, until: set[str]) -> dict[str, Any]:
    """GET the response until its status is one of `until`."""
    for _ in range(1500):
        response = client.get(f"/v1/responses/{response_id}").json()
        if response["status"] in until:
            return response
        time.sleep(0.01)
    raise AssertionError(f"{response_id} never reached {until}")


def test_the_checker_finds_what_the_spec_requires() -> None:
    assert "response.presence_penalty: missing" in problems({"object": "response"}, "ResponseResource")
    tool = {"type": "function", "name": "x", "parameters": None, "strict": None}
    assert problems(tool, "FunctionTool") == ["response.description: missing"]


def test_a_whole_response_and_its_stored_copy_carry_every_required_field(client: TestClient[HypnosApp]) -> None:
    body = {"model": "fake-chat", "input": "hello", "tools": [UNDESCRIBED], "tool_choice": "none"}
    whole = client.post("/v1/responses", json=body).json()
    assert problems(whole, "ResponseResource") == []
    assert whole["tools"] == [{**UNDESCRIBED, "description": None, "parameters": None, "strict": None}]
    assert whole["status"] == "completed" and whole["completed_at"] >= whole["created_at"]
    assert problems(client.get(f"/v1/responses/{whole['id']}").json(), "ResponseResource") == []
    schema = {"type": "json_schema", "name": "out", "schema": {"type": "object"}}
    shaped = client.post("/v1/responses", json={"model": "fake-chat", "input": "x", "text": {"format": schema}}).json()
    assert problems(shaped, "ResponseResource") == []
    incomplete = client.post("/v1/responses", json={"model": "fake-chat", "input": "x", "max_output_tokens": 2}).json()
    assert incomplete["status"] == "incomplete" and incomplete["completed_at"] is None
    assert problems(incomplete, "ResponseResource") == []


def test_each_streamed_event_that_embeds_the_response_carries_every_required_field(
    client: TestClient[HypnosApp],
) -> None:
    for extra, last in (({}, "response.completed"), ({"max_output_tokens": 2}, "response.incomplete")):
        body = {"model": "fake-chat", "input": "hi", "stream": True, "tools": [UNDESCRIBED], "tool_choice": "none"}
        body.update(extra)
        events = sse(client.post("/v1/responses", json=body).text)
        embedding = [event for event in events if "response" in event]
        assert [event["type"] for event in embedding] == ["response.created", "response.in_progress", last]
        for event in embedding:
            assert problems(event["response"], "ResponseResource", event["type"]) == []


def test_background_queued_running_cancelled_and_failed_responses_carry_every_required_field(
    client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    queued = client.post("/v1/responses", json={"model": "slow-chat", "input": "go", "background": True}).json()
    assert queued["status"] in ("queued", "in_progress") and problems(queued, "ResponseResource") == []
    running = poll(client, queued["id"], {"in_progress"})
    assert problems(running, "ResponseResource") == []
    cancelled = client.post(f"/v1/responses/{queued['id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and problems(cancelled, "ResponseResource") == []
    stored = poll(client, queued["id"], {"cancelled"})
    assert problems(stored, "ResponseResource") == []

    from hypnos.errors import HypnosError

    async def refuse(request: Any, cancel: Any) -> Any:
        raise HypnosError(400, "invalid_request_error", "the prompt is longer than the model's context")
        yield  # an async generator, as engines' chat is

    monkeypatch.setattr(client.app.state.hypnos.scheduler.get("fake-chat").engine, "chat", refuse)
    started = client.post("/v1/responses", json={"model": "fake-chat", "input": "x", "background": True}).json()
    failed = poll(client, started["id"], {"failed"})
    assert failed["error"]["code"] == "invalid_request_error" and problems(failed, "ResponseResource") == []
    replayed = sse(client.get(f"/v1/responses/{started['id']}", params={"stream": "true"}).text)
    assert replayed[-1]["type"] == "response.failed"
    assert problems(replayed[-1]["response"], "ResponseResource", "response.failed") == []


def test_an_unknown_previous_response_id_is_the_specs_not_found_error(client: TestClient[HypnosApp]) -> None:
    answer = client.post("/v1/responses", json={"model": "fake-chat", "input": "x", "previous_response_id": "resp_no"})
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["type"] == "not_found" and error["param"] == "previous_response_id"
    assert error["code"] == "previous_response_not_found" and "resp_no" in error["message"]
