"""The fake engine's chat as the browser tests use it: thoughts when asked, a call when tools are offered."""

from __future__ import annotations

from litestar.testing import TestClient
from server_kit import build_app, wait_ready

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time"}},
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def chat(client: TestClient, **body: object) -> dict:
    response = client.post("/v1/chat/completions", json={"model": "fake-chat", "messages": ASK, **body})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


def test_thinking_comes_as_reasoning_content_before_the_answer() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        message = chat(client, reasoning_effort="low")["message"]
        assert message["reasoning_content"].startswith("thinking: ")
        assert message["content"] and "thinking" not in message["content"]
        assert "reasoning_content" not in chat(client)["message"]


def test_offered_tools_are_called_until_a_result_comes_back() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        choice = chat(client, tools=TOOLS)
        assert choice["finish_reason"] == "tool_calls"
        call = choice["message"]["tool_calls"][0]
        assert call["function"] == {"name": "get_weather", "arguments": '{"query":"Weather in Paris?"}'}
        named = chat(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
        assert named["message"]["tool_calls"][0]["function"]["name"] == "get_time"
        assert chat(client, tools=TOOLS, tool_choice="none")["finish_reason"] == "stop"
        history = [
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": '{"temperature": 18}'},
        ]
        response = client.post("/v1/chat/completions", json={"model": "fake-chat", "messages": history, "tools": TOOLS})
        answer = response.json()["choices"][0]
        assert answer["finish_reason"] == "stop" and answer["message"]["content"]
