"""What coding agents (Claude Code) and the Anthropic SDKs send to POST /v1/messages, over the fake engine: system
messages inside `messages`, adaptive thinking, output_config, fields and beta flags accepted, stop_sequence, the
request-id header, and message threads (create, continue with the history, per key, Anthropic's errors)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar.testing import TestClient
from server_kit import build_app, config, wait_ready

ASK = [{"role": "user", "content": "Weather in Paris?"}]
TOOLS = [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}]
THREADS = {"anthropic-beta": "message-threads-2026-08-12"}


def post(client: TestClient, headers: dict[str, str] | None = None, **body: Any) -> Any:
    payload = {"model": "fake-chat", "max_tokens": 8, "messages": ASK, **body}
    return client.post("/v1/messages", json=payload, headers=headers or {})


def ok(client: TestClient, headers: dict[str, str] | None = None, **body: Any) -> dict[str, Any]:
    response = post(client, headers, **body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def streamed(
    client: TestClient, headers: dict[str, str] | None = None, **body: Any
) -> list[tuple[str, dict[str, Any]]]:
    response = post(client, headers, stream=True, **body)
    assert response.status_code == 200, response.text
    found = []
    for block in response.text.strip().split("\n\n"):
        kind, data = block.split("\n", 1)
        found.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return found


def refused(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) >= {"type", "message"}
    return body["error"]  # type: ignore[no-any-return]


def test_what_claude_code_sends_is_answered() -> None:
    """A system message after the user's turn, adaptive thinking with `display`, context_management, a tool with
    defer_loading, output_config.effort, anthropic-beta flags and ?beta=true: all 200."""
    with TestClient(build_app()) as client:
        wait_ready(client)
        messages = [*ASK, {"role": "system", "content": [{"type": "text", "text": "<env>cwd: /tmp</env>"}]}]
        response = client.post(
            "/v1/messages?beta=true",
            json={
                "model": "fake-chat",
                "max_tokens": 16,
                "messages": messages,
                "system": [{"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}],
                "thinking": {"type": "adaptive", "display": "updates"},
                "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
                "tools": [{**TOOLS[0], "defer_loading": True}],
                "tool_choice": {"type": "none"},
                "output_config": {"effort": "high"},
                "metadata": {"user_id": "someone"},
            },
            headers={"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025"},
        )
        assert response.status_code == 200, response.text
        blocks = [block["type"] for block in response.json()["content"]]
        assert blocks[0] == "thinking" and "text" in blocks  # adaptive: thinking on, with the model's budget
        assert ok(client, messages=[{"role": "developer", "content": "Be brief."}, *ASK])["type"] == "message"


def test_system_messages_inside_messages_reach_the_prompt_in_order() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        plain = ok(client)["usage"]["input_tokens"]
        with_system = ok(client, messages=[*ASK, {"role": "system", "content": "one two three"}])
        assert with_system["usage"]["input_tokens"] == plain + 3


def test_bad_values_get_anthropics_error_shape() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        assert "thinking.type" in refused(post(client, thinking={"type": "sometimes"}))["message"]
        assert "display" in refused(post(client, thinking={"type": "adaptive", "display": 3}))["message"]
        assert "budget_tokens" in refused(post(client, thinking={"type": "enabled"}))["message"]
        assert "output_config.format" in refused(post(client, output_config={"format": {"type": "xml"}}))["message"]
        missing = post(client, output_config={"format": {"type": "json_schema"}})
        assert "output_config.format.schema" in refused(missing)["message"]
        image = {"role": "system", "content": [{"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}
        assert "system message holds text only" in refused(post(client, messages=[*ASK, image]))["message"]
        assert "user message" in refused(post(client, messages=[{"role": "system", "content": "x"}]))["message"]
        assert "thread.type" in refused(post(client, THREADS, thread={"type": "fork"}))["message"]
        no_id = post(client, THREADS, thread={"type": "continue"})
        assert "thread.previous_message_id" in refused(no_id)["message"]


def test_output_config_format_is_accepted_as_a_json_schema() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    with TestClient(build_app()) as client:
        wait_ready(client)
        answer = ok(client, output_config={"format": {"type": "json_schema", "schema": schema}})
        assert answer["stop_reason"] in {"end_turn", "max_tokens"}


def test_a_stop_sequence_hit_is_reported_whole_and_streamed() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        words = "".join(block["text"] for block in ok(client)["content"]).split()
        stop = next(word for word in words[1:] if word != words[0])
        before = words[: words.index(stop)]
        answer = ok(client, stop_sequences=["zulu", stop])
        assert (answer["stop_reason"], answer["stop_sequence"]) == ("stop_sequence", stop)
        assert answer["content"][0]["text"].split() == before
        final = [data for kind, data in streamed(client, stop_sequences=[stop]) if kind == "message_delta"][-1]
        assert final["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}
        assert ok(client)["stop_sequence"] is None


def test_every_response_has_a_request_id_header_equal_to_x_request_id() -> None:
    with TestClient(build_app()) as client:
        wait_ready(client)
        for response in (post(client), post(client, model="nope"), client.get("/v1/models")):
            assert response.headers["request-id"] == response.headers["x-request-id"] != ""


def test_a_thread_continues_with_its_whole_history_per_key() -> None:
    keys = {"keys": [{"key": "k1", "label": "a"}, {"key": "k2", "label": "b"}]}
    one, two = {**THREADS, "x-api-key": "k1"}, {**THREADS, "x-api-key": "k2"}
    with TestClient(build_app(config(server=keys))) as client:
        wait_ready(client)
        first = ok(
            client, one, system="Be brief.", tools=TOOLS, tool_choice={"type": "none"}, thread={"type": "create"}
        )
        turn = [{"role": "user", "content": "And in Rome?"}]
        alone = ok(client, one, messages=turn, system="Be brief.", tools=TOOLS, tool_choice={"type": "none"})
        threaded = {"type": "continue", "previous_message_id": first["id"]}
        second = ok(client, one, messages=turn, tool_choice={"type": "none"}, thread=threaded)
        history = len("Weather in Paris?".split()) + len(first["content"][0]["text"].split())
        assert second["usage"]["input_tokens"] == alone["usage"]["input_tokens"] + history
        assert second["id"] != first["id"] and second["type"] == "message"  # the response's shape is unchanged
        threaded = {"type": "continue", "previous_message_id": second["id"]}
        events = streamed(client, one, messages=turn, tool_choice={"type": "none"}, thread=threaded)
        (start,) = [data["message"] for kind, data in events if kind == "message_start"]
        assert [kind for kind, _ in events][-1] == "message_stop"
        fourth = {"type": "continue", "previous_message_id": start["id"]}  # the streamed turn was kept too
        longer = ok(client, one, messages=turn, tool_choice={"type": "none"}, thread=fourth)
        assert longer["usage"]["input_tokens"] > second["usage"]["input_tokens"]
        assert post(client, two, messages=turn, thread=fourth).status_code == 404


def test_an_unknown_or_another_keys_thread_is_a_404_with_its_error_code() -> None:
    keys = {"keys": [{"key": "k1", "label": "a"}, {"key": "k2", "label": "b"}]}
    one, two = {**THREADS, "x-api-key": "k1"}, {**THREADS, "x-api-key": "k2"}
    with TestClient(build_app(config(server=keys))) as client:
        wait_ready(client)
        first = ok(client, one, thread={"type": "create"})
        for headers, previous in ((one, "msg_unknown"), (two, first["id"])):
            error = refused(post(client, headers, thread={"type": "continue", "previous_message_id": previous}), 404)
            assert error["type"] == "not_found_error" and error["details"] == {"error_code": "thread_not_found"}
        changed = post(client, one, system="Other.", thread={"type": "continue", "previous_message_id": first["id"]})
        assert refused(changed)["details"] == {"error_code": "thread_fingerprint_mismatch"}


def test_anthropic_typed_tools_bash_and_the_editor_are_functions_and_server_tools_are_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bash_* and text_editor_* (run by the client from a schema Anthropic fixes) reach the model as functions of
    that schema; server tools (web_search_20250305, code_execution_*, ...) and their blocks in the history are left
    out and named in x-hypnos-dropped-tools, whole and streamed."""
    typed = [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "code_execution_20250825", "name": "code_execution"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 10000},
    ]
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "Paris"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "text", "text": "Sunny."},
            ],
        },
        {"role": "user", "content": "Thanks. And now?"},
    ]
    with TestClient(build_app()) as client:
        wait_ready(client)
        engine = client.app.state.hypnos.scheduler.get("fake-chat").engine
        seen: list[Any] = []
        original = engine.chat
        monkeypatch.setattr(engine, "chat", lambda request, cancel: seen.append(request) or original(request, cancel))
        answer = post(client, tools=typed, messages=history)
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-hypnos-dropped-tools"] == "web_search_20250305,code_execution_20250825"
        functions = {tool.function.name: tool.function.parameters for tool in seen[0].tools}
        assert list(functions) == ["bash", "str_replace_based_edit_tool"]
        assert "command" in functions["bash"]["properties"]
        assert functions["str_replace_based_edit_tool"]["required"] == ["command", "path"]
        assert [message.role for message in seen[0].messages] == ["user", "assistant", "user"]
        call = next(block for block in answer.json()["content"] if block["type"] == "tool_use")
        assert call["name"] == "bash"
        stream = post(client, tools=typed, messages=history, stream=True)
        assert stream.headers["x-hypnos-dropped-tools"] == "web_search_20250305,code_execution_20250825"
        assert "x-hypnos-dropped-tools" not in post(client, tools=TOOLS).headers
        unknown = post(client, tools=[{"type": "teleport_20990101", "name": "beam"}])
        assert "tools[0].type" in refused(unknown)["message"]
