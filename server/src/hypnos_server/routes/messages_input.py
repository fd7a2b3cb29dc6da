"""An Anthropic Messages request (POST /v1/messages) mapped to the one internal ChatRequest: blocks to messages."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypnos.chat import ChatInput, ResponseFormat
from hypnos.config import LimitsConfig
from hypnos.errors import clip, invalid_request
from hypnos.openai import ToolCall, ToolCallFunction, ToolDefinition

from hypnos_server.routes.chat_request import (
    MAX_SCHEMA_DEPTH,
    ChatRequest,
    Conversation,
    max_tokens_of,
    nesting_depth,
    response_format_of,
    sampling_of,
    stop_of,
    tool_choice_of,
)
from hypnos_server.routes.messages_tools import MessagesTools, read_tools

TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
SKIPPED_BLOCKS = {"thinking", "redacted_thinking"}  # thoughts are never sent back to the model
# A server tool's call and its result (`web_search_tool_result`, ...): Hypnos runs no server tool, so they are skipped
SERVER_TOOL_BLOCKS = ("server_tool_use", "mcp_tool_use", "mcp_tool_result")


class MessagesRequest(msgspec.Struct, kw_only=True):
    """POST /v1/messages (and count_tokens) body: the fields Hypnos reads (unknown ones are ignored)."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None  # `format` (structured output) is read; `effort` is ignored
    context_management: Any = None  # accepted and ignored: Hypnos edits no context
    thread: dict[str, Any] | None = None  # message threads (anthropic-beta message-threads-2026-08-12)


SYSTEM_ROLES = {"system": "system", "developer": "system"}  # inside `messages`, as Claude Code sends them
THINKING_TYPES = {"enabled", "disabled", "adaptive"}


def _system_text(system: str | list[dict[str, Any]] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    return "".join(str(block.get("text") or "") for block in system if block.get("type") == "text") or None


def _system_message(content: Any, index: int) -> str:
    """The text of a system (or developer) message inside `messages`: a string or text blocks."""
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else [None]
    texts = [block for block in blocks if isinstance(block, dict) and block.get("type") == "text"]
    if len(texts) != len(blocks):
        raise invalid_request(f"Invalid value for `messages[{index}].content`: a system message holds text only")
    return "".join(str(block.get("text") or "") for block in texts)


def _image_url(block: dict[str, Any], where: str) -> str:
    source = block.get("source") or {}
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    raise invalid_request(f"Invalid value for `{where}.source`: a base64 or url image source")


def _add_tool_result(conversation: Conversation, block: dict[str, Any], where: str) -> None:
    if not isinstance(block.get("tool_use_id"), str):
        raise invalid_request(f"Missing required field `{where}.tool_use_id`")
    content = block.get("content", "")
    if isinstance(content, list):
        text = "".join(str(part.get("text") or "") for part in content if part.get("type") == "text")
    else:
        text = str(content)
    if block.get("is_error"):
        text = f"Error: {text}"
    conversation.add("tool", text, tool_call_id=block["tool_use_id"])


def add_messages(conversation: Conversation, body: MessagesRequest) -> None:
    """The conversation: the system prompt, then each message's blocks (tool results become tool messages)."""
    system = _system_text(body.system)
    if system:
        conversation.add("system", system)
    if not body.messages:
        raise invalid_request("`messages` must be a non-empty array")
    if not any(message.get("role") in ("user", "assistant") for message in body.messages):
        raise invalid_request("`messages` must hold a user message")
    for index, message in enumerate(body.messages):
        role, content = message.get("role"), message.get("content")
        if role in SYSTEM_ROLES:  # rendered where it stands when the model's template allows (see the README)
            conversation.add(SYSTEM_ROLES[role], _system_message(content, index))
            continue
        if role not in ("user", "assistant"):
            raise invalid_request(
                f"Invalid value for `messages[{index}].role`: `{clip(role)}` (user, assistant or system)"
            )
        if isinstance(content, str):
            conversation.add(role, content)
            continue
        if not isinstance(content, list):
            raise invalid_request(f"Invalid value for `messages[{index}].content`: a string or an array of blocks")
        parts: list[tuple[str, str]] = []  # ("text" | "image", text or URL), in order
        calls: list[ToolCall] = []
        for number, block in enumerate(content):
            kind, where = block.get("type") if isinstance(block, dict) else None, f"messages[{index}].content[{number}]"
            if kind == "text":
                parts.append(("text", str(block.get("text") or "")))
            elif kind == "image":
                parts.append(("image", _image_url(block, where)))
            elif kind == "tool_use" and role == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                    raise invalid_request(f"`{where}` (tool_use) needs `id` and `name`")
                arguments = json.dumps(block.get("input") or {})
                calls.append(
                    ToolCall(id=block["id"], function=ToolCallFunction(name=block["name"], arguments=arguments))
                )
            elif kind == "tool_result" and role == "user":
                _add_tool_result(conversation, block, where)
            elif kind in SERVER_TOOL_BLOCKS or (str(kind).endswith("_tool_result") and kind != "tool_result"):
                continue
            elif kind not in SKIPPED_BLOCKS:
                raise invalid_request(f"Invalid value for `{where}.type`: `{clip(kind)}` is not supported here")
        if parts or calls:
            added = conversation.add(role, tool_calls=calls)
            for kind, value in parts:
                if kind == "text":
                    conversation.text(added, value)
                else:
                    conversation.image(added, value)


def _tool_choice(choice: dict[str, Any] | None, tools: list[ToolDefinition]) -> tuple[str, str | None]:
    if choice is None:
        return tool_choice_of(None, tools)
    kind = choice.get("type")
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise invalid_request("Missing required field `tool_choice.name`")
        return tool_choice_of(None, tools, forced=choice["name"])
    if kind not in TOOL_CHOICES:
        raise invalid_request(f"Invalid value for `tool_choice.type`: `{clip(kind)}` (auto, any, tool or none)")
    return tool_choice_of(TOOL_CHOICES[kind], tools)


def _thinking(thinking: dict[str, Any] | None) -> tuple[bool, int | None]:
    """`thinking`: enabled with budget_tokens turns the model's thinking on with that budget, adaptive with the
    model's default budget (`display` accepted: thoughts are always streamed); disabled turns it off."""
    if thinking is None:
        return False, None
    kind, budget, display = thinking.get("type"), thinking.get("budget_tokens"), thinking.get("display")
    if kind not in THINKING_TYPES:
        raise invalid_request(f"Invalid value for `thinking.type`: `{clip(kind)}` (enabled, adaptive or disabled)")
    if display is not None and not isinstance(display, str):
        raise invalid_request("Invalid value for `thinking.display`: a string")
    if kind == "disabled":
        return False, None
    if kind == "adaptive" and budget is None:
        return True, None
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise invalid_request("Invalid value for `thinking.budget_tokens`: an integer >= 1")
    return True, budget


def _output_format(output_config: dict[str, Any] | None) -> ResponseFormat | None:
    """`output_config.format`: a json_schema answer (structured output), enforced by the engine's grammar."""
    wire = (output_config or {}).get("format")
    if wire is None:
        return None
    if not isinstance(wire, dict) or wire.get("type") != "json_schema":
        raise invalid_request('Invalid value for `output_config.format`: {"type": "json_schema", "schema": {...}}')
    if not isinstance(wire.get("schema"), dict):
        raise invalid_request("Missing required field `output_config.format.schema`")
    if nesting_depth(wire["schema"]) > MAX_SCHEMA_DEPTH:
        raise invalid_request(f"Invalid value for `output_config.format.schema`: nested deeper than {MAX_SCHEMA_DEPTH}")
    return response_format_of("json_schema", wire.get("name"), wire["schema"], True, field="output_config.format")


def messages_request(
    body: MessagesRequest, limits: LimitsConfig, counting: bool = False, tools: MessagesTools | None = None
) -> ChatRequest:
    """The ChatRequest of a Messages body (`counting`: for count_tokens, one token made and thinking left off) whose
    tools read as `tools` (read from the body when not given)."""
    if not counting and body.max_tokens is None:
        raise invalid_request("Missing required field `max_tokens`")
    conversation = Conversation(limits)
    add_messages(conversation, body)
    messages = conversation.checked()
    max_tokens = max_tokens_of(1 if counting else body.max_tokens, limits)
    functions = (tools or read_tools(body.tools)).functions
    tool_choice, forced = _tool_choice(body.tool_choice, functions)
    thinking, budget = (False, None) if counting else _thinking(body.thinking)
    chat = ChatInput(
        messages=messages,
        max_tokens=max_tokens,
        sampling=sampling_of(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k),
        tools=functions,
        tool_choice=tool_choice,
        forced_tool=forced,
        thinking=thinking,
        thinking_budget=budget,
        response_format=_output_format(body.output_config),
        stop=stop_of(body.stop_sequences or None, "stop_sequences"),
    )
    return conversation.request(body.model, chat, stream=body.stream and not counting)
