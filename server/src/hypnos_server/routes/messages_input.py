"""An Anthropic Messages request (POST /v1/messages) read as the chat request it means: blocks to chat messages."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypnos.chat import ChatInput
from hypnos.errors import clip, invalid_request
from hypnos.openai import (
    ChatCompletionRequest,
    ChatMessage,
    ContentPart,
    FunctionDefinition,
    ImageUrl,
    ToolCall,
    ToolCallFunction,
    ToolChoiceFunction,
    ToolChoiceObject,
    ToolDefinition,
)

TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
SKIPPED_BLOCKS = {"thinking", "redacted_thinking"}  # thoughts are never sent back to the model


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


def _system_text(system: str | list[dict[str, Any]] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    return "".join(str(block.get("text") or "") for block in system if block.get("type") == "text") or None


def _image(block: dict[str, Any], where: str) -> ContentPart:
    source = block.get("source") or {}
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        url = f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise invalid_request(f"Invalid value for `{where}.source`: a base64 or url image source")
    return ContentPart(type="image_url", image_url=ImageUrl(url=url))


def _tool_result(block: dict[str, Any], where: str) -> ChatMessage:
    if not isinstance(block.get("tool_use_id"), str):
        raise invalid_request(f"Missing required field `{where}.tool_use_id`")
    content = block.get("content", "")
    if isinstance(content, list):
        text = "".join(str(part.get("text") or "") for part in content if part.get("type") == "text")
    else:
        text = str(content)
    if block.get("is_error"):
        text = f"Error: {text}"
    return ChatMessage(role="tool", content=text, tool_call_id=block["tool_use_id"])


def chat_messages(body: MessagesRequest) -> list[ChatMessage]:
    """The chat conversation: the system prompt, then each message's blocks (tool results become tool messages)."""
    system = _system_text(body.system)
    messages = [ChatMessage(role="system", content=system)] if system else []
    if not body.messages:
        raise invalid_request("`messages` must be a non-empty array")
    for index, message in enumerate(body.messages):
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant"):
            raise invalid_request(f"Invalid value for `messages[{index}].role`: `{clip(role)}` (user or assistant)")
        if isinstance(content, str):
            messages.append(ChatMessage(role=role, content=content))
            continue
        if not isinstance(content, list):
            raise invalid_request(f"Invalid value for `messages[{index}].content`: a string or an array of blocks")
        parts: list[ContentPart] = []
        calls: list[ToolCall] = []
        for number, block in enumerate(content):
            kind, where = block.get("type") if isinstance(block, dict) else None, f"messages[{index}].content[{number}]"
            if kind == "text":
                parts.append(ContentPart(type="text", text=str(block.get("text") or "")))
            elif kind == "image":
                parts.append(_image(block, where))
            elif kind == "tool_use" and role == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                    raise invalid_request(f"`{where}` (tool_use) needs `id` and `name`")
                arguments = json.dumps(block.get("input") or {})
                calls.append(
                    ToolCall(id=block["id"], function=ToolCallFunction(name=block["name"], arguments=arguments))
                )
            elif kind == "tool_result" and role == "user":
                messages.append(_tool_result(block, where))
            elif kind not in SKIPPED_BLOCKS:
                raise invalid_request(f"Invalid value for `{where}.type`: `{clip(kind)}` is not supported here")
        if parts or calls:
            messages.append(ChatMessage(role=role, content=parts or None, tool_calls=calls or None))
    return messages


def _tools(tools: list[dict[str, Any]] | None) -> list[ToolDefinition] | None:
    found = []
    for index, tool in enumerate(tools or []):
        if not isinstance(tool.get("name"), str) or ("type" in tool and tool["type"] not in (None, "custom")):
            raise invalid_request(f"Invalid value for `tools[{index}]`: a custom tool with `name` and `input_schema`")
        schema = tool.get("input_schema")
        definition = FunctionDefinition(
            name=tool["name"],
            description=tool.get("description"),
            parameters=schema if isinstance(schema, dict) else None,
        )
        found.append(ToolDefinition(function=definition))
    return found or None


def _tool_choice(choice: dict[str, Any] | None) -> str | ToolChoiceObject | None:
    if choice is None:
        return None
    kind = choice.get("type")
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise invalid_request("Missing required field `tool_choice.name`")
        return ToolChoiceObject(function=ToolChoiceFunction(name=choice["name"]))
    if kind not in TOOL_CHOICES:
        raise invalid_request(f"Invalid value for `tool_choice.type`: `{clip(kind)}` (auto, any, tool or none)")
    return TOOL_CHOICES[kind]


def chat_request(body: MessagesRequest, max_tokens: int | None) -> ChatCompletionRequest:
    """The chat request this Messages request means, for chat's own checks and ChatInput."""
    return ChatCompletionRequest(
        model=body.model,
        messages=chat_messages(body),
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        stop=body.stop_sequences or None,
        tools=_tools(body.tools),
        tool_choice=_tool_choice(body.tool_choice),
    )


def apply_thinking(chat: ChatInput, thinking: dict[str, Any] | None) -> None:
    """`thinking`: enabled with budget_tokens turns the model's thinking on with that budget; disabled turns it off."""
    if thinking is None:
        return
    kind = thinking.get("type")
    if kind == "disabled":
        chat.thinking, chat.thinking_budget = False, None
        return
    budget = thinking.get("budget_tokens")
    if kind != "enabled" or not isinstance(budget, int) or budget < 1:
        raise invalid_request('Invalid value for `thinking`: {"type": "enabled", "budget_tokens": n} or disabled')
    chat.thinking, chat.thinking_budget = True, budget
