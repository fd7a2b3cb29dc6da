"""Tool calling with the real Qwen2.5-Coder-0.5B GGUF through the real server and the OpenAI SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .qwen_openai import MODEL, WEATHER

pytestmark = pytest.mark.model
QUESTION = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(qwen_server: str) -> str:
    """The shared Qwen server (conftest)."""
    return qwen_server


@pytest.fixture
def client(server: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)


def test_required_tool_choice_returns_a_parsed_call(client: Any) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=64
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_")
    arguments = json.loads(call.function.arguments)
    assert "paris" in str(arguments.get("city", "")).lower()


def test_two_turn_exchange_answers_in_text(client: Any) -> None:
    first = client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=64
    )
    call = first.choices[0].message.tool_calls[0]
    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "condition": "sunny"})},
    ]
    second = client.chat.completions.create(
        model=MODEL, messages=history, tools=[WEATHER], temperature=0, max_tokens=64
    )
    message = second.choices[0].message
    assert second.choices[0].finish_reason == "stop" and not message.tool_calls
    assert "18" in message.content or "sunny" in message.content.lower()


def test_streaming_shows_the_call_in_one_chunk(client: Any) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            tools=[WEATHER],
            tool_choice="required",
            temperature=0,
            max_tokens=64,
            stream=True,
        )
    )
    with_calls = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert len(with_calls) == 1
    (call,) = with_calls[0].choices[0].delta.tool_calls
    assert call.index == 0 and call.function.name == "get_weather" and call.id.startswith("call_")
    json.loads(call.function.arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_named_tool_choice_is_enforced(client: Any) -> None:
    clock = {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}},
    }
    answer = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=[WEATHER, clock],
        temperature=0,
        max_tokens=64,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    assert [c.function.name for c in answer.choices[0].message.tool_calls] == ["get_time"]


def test_tool_choice_none_answers_in_text(client: Any) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=32
    )
    assert answer.choices[0].message.tool_calls is None and answer.choices[0].message.content
