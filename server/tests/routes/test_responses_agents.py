"""What coding agents send to POST /v1/responses (Codex CLI's request, as clients.md records it): namespace tools
flattened for the model and named back as the client declared them, hosted tools dropped and listed in a header,
and the fields with no meaning here (reasoning, store false, include, prompt_cache_key) accepted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypnos_server.app import HypnosApp
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

SHELL = {
    "type": "function",
    "name": "shell_command",
    "description": "Run a shell command",
    "strict": False,
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}
NAMESPACE = {
    "type": "namespace",
    "name": "mcp__files__",
    "description": "File tools",
    "tools": [{"type": "function", "name": "read", "description": "Read a file", "strict": False, "parameters": {}}],
}
HOSTED = [
    {"type": "web_search", "external_web_access": False},
    {"type": "image_generation"},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:1"},
]
CODEX_FIELDS = {
    "instructions": "You are a coding agent.",
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "0197-session",
    "parallel_tool_calls": False,
    "tool_choice": "auto",
}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[HypnosApp]]:
    with TestClient(build_app(config(server={"data_dir": str(tmp_path / "data")}))) as test_client:
        wait_ready(test_client)
        yield test_client


def seen_by_the_model(client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every ChatInput the fake chat model is given from now on."""
    engine = client.app.state.hypnos.scheduler.get("fake-chat").engine
    chats: list[Any] = []
    original = engine.chat

    def spy(request: Any, cancel: Any) -> Any:
        chats.append(request)
        return original(request, cancel)

    monkeypatch.setattr(engine, "chat", spy)
    return chats


def test_codex_s_request_is_answered_with_its_namespaced_call_and_the_dropped_tools_named(
    client: TestClient[HypnosApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    chats = seen_by_the_model(client, monkeypatch)
    body = {"model": "fake-chat", "input": "read hello.txt", "tools": [NAMESPACE, SHELL, *HOSTED], **CODEX_FIELDS}
    answer = client.post("/v1/responses", json=body)
    assert answer.status_code == 200, answer.text
    listed = "web_search,image_generation,file_search,code_interpreter,mcp"
    assert answer.headers["x-hypnos-dropped-tools"] == listed
    assert [tool.function.name for tool in chats[0].tools] == ["mcp__files__read", "shell_command"]
    call = next(item for item in answer.json()["output"] if item["type"] == "function_call")
    assert call["type"] == "function_call" and call["name"] == "read" and call["namespace"] == "mcp__files__"
    assert [tool["name"] for tool in answer.json()["tools"]] == ["mcp__files__read", "shell_command"]
    assert answer.json()["prompt_cache_key"] == "0197-session" and answer.json()["store"] is False

    streamed = client.post("/v1/responses", json={**body, "stream": True})
    assert streamed.status_code == 200 and streamed.headers["x-hypnos-dropped-tools"] == listed
    data = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
    events = [json.loads(payload) for payload in data if payload != "[DONE]"]
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    assert [(item["name"], item["namespace"]) for item in done if item["type"] == "function_call"] == [
        ("read", "mcp__files__")
    ]

    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "hello world"}
    second = client.post(
        "/v1/responses",
        json={**body, "input": [{"role": "user", "content": "read hello.txt"}, call, result]},
    )
    assert second.status_code == 200, second.text
    called = [call.function.name for message in chats[-1].messages for call in message.tool_calls]
    assert called == ["mcp__files__read"]
    assert [item["type"] for item in second.json()["output"]][-1] == "message"


def test_a_request_without_hosted_tools_has_no_dropped_header(client: TestClient[HypnosApp]) -> None:
    answer = client.post("/v1/responses", json={"model": "fake-chat", "input": "hi", "tools": [SHELL]})
    assert answer.status_code == 200 and "x-hypnos-dropped-tools" not in answer.headers


def test_bad_namespaces_and_a_name_declared_twice_are_400s(client: TestClient[HypnosApp]) -> None:
    empty = client.post("/v1/responses", json={"model": "fake-chat", "input": "x", "tools": [{"type": "namespace"}]})
    assert empty.status_code == 400 and "tools[0]" in empty.json()["error"]["message"]
    twice = client.post("/v1/responses", json={"model": "fake-chat", "input": "x", "tools": [SHELL, SHELL]})
    assert twice.status_code == 400 and "shell_command" in twice.json()["error"]["message"]
    call = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}", "namespace": 7}
    odd = client.post("/v1/responses", json={"model": "fake-chat", "input": [call], "tools": [NAMESPACE]})
    assert odd.status_code == 400 and "input[0].namespace" in odd.json()["error"]["message"]
