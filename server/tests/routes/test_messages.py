"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages) over the fake engine: the message and event
stream shapes, tool_use / tool_result, Anthropic's error shape and statuses, and x-api-key auth."""

from __future__ import annotations

import json
from typing import Any

from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

ASK = [{"role": "user", "content": "Weather in Paris?"}]
TOOLS = [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}]


def message(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/messages", json={"model": "fake-chat", "max_tokens": 32, "messages": ASK, **body})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def events(client: TestClient, **body: Any) -> list[tuple[str, dict[str, Any]]]:
    payload = {"model": "fake-chat", "max_tokens": 32, "messages": ASK, "stream": True, **body}
    response = client.post("/v1/messages", json=payload)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    found = []
    for block in response.text.strip().split("\n\n"):
        kind, data = block.split("\n", 1)
        found.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return found


def test_a_message_has_anthropics_shape_and_usage() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        answer = message(client, system=[{"type": "text", "text": "Be brief."}])
        assert answer["type"] == "message" and answer["role"] == "assistant" and answer["id"].startswith("msg_")
        assert answer["stop_reason"] == "end_turn" and answer["content"][0]["type"] == "text"
        assert set(answer["usage"]) >= {"input_tokens", "output_tokens", "cache_read_input_tokens"}
        assert "hypnos_telemetry" in answer
        assert message(client, max_tokens=2)["stop_reason"] == "max_tokens"


def test_the_event_stream_opens_and_closes_each_block() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        found = events(client, thinking={"type": "enabled", "budget_tokens": 64})
        kinds = [kind for kind, _ in found]
        assert kinds[:3] == ["message_start", "ping", "content_block_start"] and kinds[-2:] == [
            "message_delta",
            "message_stop",
        ]
        starts = [data["content_block"]["type"] for kind, data in found if kind == "content_block_start"]
        assert starts == ["thinking", "text"]
        deltas = {data["delta"]["type"] for kind, data in found if kind == "content_block_delta"}
        assert {"thinking_delta", "text_delta"} <= deltas
        assert kinds.count("content_block_start") == kinds.count("content_block_stop")
        final = found[-2][1]
        assert final["delta"]["stop_reason"] == "end_turn" and final["usage"]["output_tokens"] > 0


def test_a_tool_use_round_trip_with_its_tool_result() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        first = message(client, tools=TOOLS)
        assert first["stop_reason"] == "tool_use"
        use = first["content"][0]
        assert use["type"] == "tool_use" and use["name"] == "get_weather" and isinstance(use["input"], dict)
        result = {"type": "tool_result", "tool_use_id": use["id"], "content": "18 degrees"}
        history = [*ASK, {"role": "assistant", "content": first["content"]}, {"role": "user", "content": [result]}]
        second = message(client, tools=TOOLS, messages=history)
        assert second["stop_reason"] == "end_turn" and second["content"][0]["type"] == "text"
        streamed = events(client, tools=TOOLS)
        assert "input_json_delta" in {d["delta"]["type"] for k, d in streamed if k == "content_block_delta"}
        assert message(client, tools=TOOLS, tool_choice={"type": "none"})["stop_reason"] == "end_turn"


def test_count_tokens_counts_the_rendered_prompt() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        short = client.post("/v1/messages/count_tokens", json={"model": "fake-chat", "messages": ASK})
        long = client.post(
            "/v1/messages/count_tokens",
            json={"model": "fake-chat", "messages": [{"role": "user", "content": "a b c d e f g h"}]},
        )
        assert short.status_code == 200 and long.json()["input_tokens"] > short.json()["input_tokens"] > 0


def test_errors_come_in_anthropics_shape_with_its_statuses() -> None:
    with TestClient(build_app(config(server={"keys": [{"key": "k1", "label": "a"}]}))) as client:
        wait_ready(client)
        missing = client.post("/v1/messages", json={"model": "fake-chat", "messages": ASK}, headers={"x-api-key": "k1"})
        assert missing.status_code == 400
        assert missing.json() == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "Missing required field `max_tokens`"},
        }
        unknown = client.post(
            "/v1/messages", json={"model": "nope", "max_tokens": 4, "messages": ASK}, headers={"x-api-key": "k1"}
        )
        assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"
        bad_key = client.post(
            "/v1/messages", json={"model": "fake-chat", "max_tokens": 4, "messages": ASK}, headers={"x-api-key": "k2"}
        )
        assert bad_key.status_code == 401 and bad_key.json()["error"]["type"] == "authentication_error"
        bad_role = {"model": "fake-chat", "max_tokens": 4, "messages": [{"role": "tool", "content": "x"}]}
        assert (
            client.post("/v1/messages", json=bad_role, headers={"x-api-key": "k1"}).json()["error"]["type"]
            == "invalid_request_error"
        )
        chat = client.post("/v1/chat/completions", json={"model": "nope", "messages": ASK}, headers={"x-api-key": "k1"})
        assert (
            chat.status_code == 404 and chat.json()["error"]["type"] == "model_not_found"
        )  # OpenAI routes keep theirs
        ok = client.post(
            "/v1/messages", json={"model": "fake-chat", "max_tokens": 4, "messages": ASK}, headers={"x-api-key": "k1"}
        )
        assert ok.status_code == 200
