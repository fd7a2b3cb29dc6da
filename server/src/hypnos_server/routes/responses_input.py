"""A Responses request (POST /v1/responses) read as the chat request it means: items to messages, options to chat's."""

from __future__ import annotations

import secrets
from typing import Any

import msgspec
from hypnos.errors import clip, invalid_request
from hypnos.openai import (
    ChatCompletionRequest,
    ChatMessage,
    ContentPart,
    FunctionDefinition,
    ImageUrl,
    InputAudio,
    JsonSchemaFormat,
    ResponseFormatParam,
    ToolCall,
    ToolCallFunction,
    ToolChoiceFunction,
    ToolChoiceObject,
    ToolDefinition,
)

BUILT_IN_TOOLS = {
    "web_search",
    "web_search_preview",
    "file_search",
    "code_interpreter",
    "computer_use_preview",
    "computer",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "custom",
}
MESSAGE_ROLES = {"user", "assistant", "system", "developer"}
TEXT_PARTS = {"input_text", "output_text", "text", "refusal"}


class ResponsesRequest(msgspec.Struct, kw_only=True):
    """POST /v1/responses body: the fields Hypnos reads (unknown ones are ignored)."""

    model: str
    input: str | list[dict[str, Any]] = []
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stream: bool = False
    store: bool = True
    background: bool = False
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = None
    num_ctx: int | None = None


def item_id(prefix: str) -> str:
    """A fresh `<prefix>_<hex>` id."""
    return f"{prefix}_{secrets.token_hex(12)}"


def input_items(body: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's own input as normalized items (each with an id): a string input is one user message."""
    raw = [{"type": "message", "role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    items = []
    for index, item in enumerate(raw):
        kind = item.get("type") or ("message" if "role" in item else None)
        where = f"input[{index}]"
        if kind == "message":
            role = item.get("role")
            if role not in MESSAGE_ROLES:
                raise invalid_request(f"Invalid value for `{where}.role`: `{clip(role)}`")
            content = item.get("content")
            if isinstance(content, str):
                content = [{"type": "input_text" if role != "assistant" else "output_text", "text": content}]
            if not isinstance(content, list):
                raise invalid_request(f"Invalid value for `{where}.content`: a string or an array of parts")
            items.append({"type": "message", "id": item.get("id") or item_id("msg"), "role": role, "content": content})
        elif kind == "function_call":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                raise invalid_request(f"`{where}` (function_call) needs `call_id` and `name`")
            arguments = item.get("arguments", "{}")
            if not isinstance(arguments, str):
                raise invalid_request(f"Invalid value for `{where}.arguments`: a JSON string")
            items.append({**item, "arguments": arguments, "id": item.get("id") or item_id("fc"), "status": "completed"})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise invalid_request(f"`{where}` (function_call_output) needs `call_id`")
            items.append({**item, "id": item.get("id") or item_id("fco"), "status": "completed"})
        elif kind == "reasoning":
            continue  # thoughts are never sent back to the model
        else:
            raise invalid_request(f"Invalid value for `{where}.type`: `{clip(kind)}` is not supported here")
    return items


def chat_messages(instructions: str | None, items: list[dict[str, Any]]) -> list[ChatMessage]:
    """The chat conversation of `instructions` and items (inputs and earlier outputs, in order)."""
    messages = [ChatMessage(role="system", content=instructions)] if instructions else []
    for index, item in enumerate(items):
        kind = item.get("type")
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append(ChatMessage(role=role, content=_parts(item["content"], index)))
        elif kind == "function_call":
            call = ToolCall(
                id=item["call_id"], function=ToolCallFunction(name=item["name"], arguments=item["arguments"])
            )
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                messages.append(ChatMessage(role="assistant", content=None, tool_calls=[call]))
        elif kind == "function_call_output":
            output = item.get("output", "")
            content = output if isinstance(output, str) else _parts(output, index)
            messages.append(ChatMessage(role="tool", content=content, tool_call_id=item["call_id"]))
    if not messages:
        raise invalid_request("`input` must hold at least one message")
    return messages


def _parts(content: list[Any], index: int) -> list[ContentPart]:
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            parts.append(ContentPart(type="text", text=str(part.get("text") or part.get("refusal") or "")))
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise invalid_request(f"`input[{index}]` input_image needs `image_url` (file ids are not supported)")
            parts.append(ContentPart(type="image_url", image_url=ImageUrl(url=url, detail=part.get("detail"))))
        elif kind == "input_audio":
            audio = part.get("input_audio") or {}
            if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
                raise invalid_request(f"`input[{index}]` input_audio needs `input_audio.data` (base64)")
            parts.append(
                ContentPart(
                    type="input_audio", input_audio=InputAudio(data=audio["data"], format=audio.get("format") or "wav")
                )
            )
        else:
            raise invalid_request(f"Invalid value for `input[{index}].content`: unknown part `{clip(kind)}`")
    return parts


def function_tools(tools: list[dict[str, Any]] | None) -> list[ToolDefinition]:
    """Function tools as chat's; a built-in OpenAI tool (web search, file search ...) is a 400 naming it."""
    found = []
    for index, tool in enumerate(tools or []):
        kind = tool.get("type")
        if kind != "function":
            if kind in BUILT_IN_TOOLS:
                raise invalid_request(
                    f"The built-in tool `{kind}` (`tools[{index}]`) is not available on Hypnos; declare a function tool"
                )
            raise invalid_request(f"Invalid value for `tools[{index}].type`: `{clip(kind)}`")
        if not isinstance(tool.get("name"), str):
            raise invalid_request(f"Missing required field `tools[{index}].name`")
        parameters = tool.get("parameters")
        found.append(
            ToolDefinition(
                function=FunctionDefinition(
                    name=tool["name"],
                    description=tool.get("description"),
                    parameters=parameters if isinstance(parameters, dict) else None,
                )
            )
        )
    return found


def _tool_choice(choice: str | dict[str, Any] | None) -> str | ToolChoiceObject | None:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return ToolChoiceObject(function=ToolChoiceFunction(name=choice["name"]))
    raise invalid_request('Invalid value for `tool_choice`: "none", "auto", "required" or a function by name')


def _response_format(text: dict[str, Any] | None) -> ResponseFormatParam | None:
    wire = (text or {}).get("format")
    if wire is None:
        return None
    if not isinstance(wire, dict):
        raise invalid_request("Invalid value for `text.format`: an object with `type`")
    kind = wire.get("type", "text")
    if kind != "json_schema":
        return ResponseFormatParam(type=str(kind))
    schema = JsonSchemaFormat(name=wire.get("name"), schema=wire.get("schema"), strict=wire.get("strict"))
    return ResponseFormatParam(type="json_schema", json_schema=schema)


def chat_request(body: ResponsesRequest, messages: list[ChatMessage]) -> ChatCompletionRequest:
    """The chat request this Responses request means, for chat's own checks and ChatInput."""
    effort = (body.reasoning or {}).get("effort")
    return ChatCompletionRequest(
        model=body.model,
        messages=messages,
        max_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        num_ctx=body.num_ctx,
        reasoning_effort=effort if isinstance(effort, str) else None,
        tools=function_tools(body.tools) or None,
        tool_choice=_tool_choice(body.tool_choice),
        response_format=_response_format(body.text),
    )
