"""Responses `tool_choice` `allowed_tools` (the model may call only the functions it names) and `max_tool_calls` (no
more calls than that in the output; 0: the model is shown no tools), whole and streamed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypnos.engine import ChatAccepted, ChatFinished, ToolCallEvent
from hypnos.openai import ToolCall, ToolCallFunction
from hypnos_server.app import HypnosApp
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready


def function(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


TOOLS = [function("get_weather"), function("get_time"), {"type": "web_search"}]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[HypnosApp]]:
    with TestClient(build_app(config(server={"data_dir": str(tmp_path / "data")}))) as test_client:
        wait_ready(test_client)
        yield test_client


def seen_by_the_model(client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch, calls: int = 0) -> list[Any]:
    """Every ChatInput the fake chat model is given from now on; with `calls`, the model answers by calling each
    tool it sees in turn, `calls` calls in all."""
    engine = client.app.state.hypnos.scheduler.get("fake-chat").engine
    chats: list[Any] = []
    original = engine.chat

    async def calling(request: Any) -> AsyncIterator[Any]:
        yield ChatAccepted(prompt_tokens=3)
        for number in range(calls):
            name = request.tools[number % len(request.tools)].function.name
            yield ToolCallEvent(ToolCall(id=f"call_{number}", function=ToolCallFunction(name=name, arguments="{}")))
        yield ChatFinished(finish_reason="tool_calls", prompt_tokens=3, completion_tokens=calls)

    def spy(request: Any, cancel: Any) -> Any:
        chats.append(request)
        return calling(request) if calls else original(request, cancel)

    monkeypatch.setattr(engine, "chat", spy)
    return chats


def streamed_calls(client: TestClient[HypnosApp], body: dict[str, Any]) -> list[str]:
    """The names of the function_call items a streamed response finished with."""
    answer = client.post("/v1/responses", json={**body, "stream": True})
    assert answer.status_code == 200, answer.text
    events = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: {")]
    final = next(event for event in events if event["type"] == "response.completed")["response"]
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    assert [item["name"] for item in done if item["type"] == "function_call"] == [
        item["name"] for item in final["output"] if item["type"] == "function_call"
    ]
    return [item["name"] for item in final["output"] if item["type"] == "function_call"]


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_allowed_tools_leaves_the_model_only_the_functions_it_names(
    client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    chats = seen_by_the_model(client, monkeypatch)
    choice = {"type": "allowed_tools", "mode": mode, "tools": [{"type": "function", "name": "get_time"}]}
    body = {"model": "fake-chat", "input": "what time is it?", "tools": TOOLS, "tool_choice": choice}
    answer = client.post("/v1/responses", json=body)
    assert answer.status_code == 200, answer.text
    assert [tool.function.name for tool in chats[0].tools] == ["get_time"]
    assert chats[0].tool_choice == mode
    calls = [item["name"] for item in answer.json()["output"] if item["type"] == "function_call"]
    assert calls == ["get_time"]
    assert answer.json()["tool_choice"] == choice
    assert [tool["name"] for tool in answer.json()["tools"]] == ["get_weather", "get_time"]


def test_allowed_tools_naming_an_undeclared_function_or_a_bad_mode_is_a_400(client: TestClient[HypnosApp]) -> None:
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "read_file"}]}
    body = {"model": "fake-chat", "input": "x", "tools": TOOLS, "tool_choice": choice}
    answer = client.post("/v1/responses", json=body)
    assert answer.status_code == 400 and "read_file" in answer.json()["error"]["message"]
    body["tool_choice"] = {**choice, "mode": "sometimes", "tools": [{"type": "function", "name": "get_time"}]}
    answer = client.post("/v1/responses", json=body)
    assert answer.status_code == 400 and "tool_choice.mode" in answer.json()["error"]["message"]


def test_max_tool_calls_zero_shows_the_model_no_tools(
    client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    chats = seen_by_the_model(client, monkeypatch)
    body = {"model": "fake-chat", "input": "weather?", "tools": TOOLS, "max_tool_calls": 0}
    answer = client.post("/v1/responses", json=body)
    assert answer.status_code == 200, answer.text
    assert chats[0].tool_choice == "none"
    assert [item["type"] for item in answer.json()["output"]] == ["message"]
    assert answer.json()["max_tool_calls"] == 0
    required = client.post("/v1/responses", json={**body, "tool_choice": "required"})
    assert required.status_code == 400 and "max_tool_calls" in required.json()["error"]["message"]
    negative = client.post("/v1/responses", json={**body, "max_tool_calls": -1})
    assert negative.status_code == 400 and "max_tool_calls" in negative.json()["error"]["message"]


def test_calls_past_max_tool_calls_are_left_out_whole_and_streamed(
    client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_by_the_model(client, monkeypatch, calls=3)
    body = {"model": "fake-chat", "input": "weather and time?", "tools": TOOLS, "max_tool_calls": 2}
    answer = client.post("/v1/responses", json=body)
    assert answer.status_code == 200, answer.text
    calls = [item["name"] for item in answer.json()["output"] if item["type"] == "function_call"]
    assert calls == ["get_weather", "get_time"]
    assert streamed_calls(client, body) == ["get_weather", "get_time"]
    unbounded = client.post("/v1/responses", json={**body, "max_tool_calls": None})
    assert len([item for item in unbounded.json()["output"] if item["type"] == "function_call"]) == 3
