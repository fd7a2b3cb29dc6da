"""A Responses request (POST /v1/responses) mapped to the one internal ChatRequest: items to messages, options."""

from __future__ import annotations

import secrets
from typing import Any

import msgspec
from hypnos.chat import ChatInput, InputMessage, ResponseFormat
from hypnos.config import LimitsConfig
from hypnos.errors import clip, invalid_request
from hypnos.openai import ToolCall, ToolCallFunction, ToolDefinition

from hypnos_server.routes.chat_input import thinking_of
from hypnos_server.routes.chat_request import (
    ChatRequest,
    Conversation,
    checked_tools,
    context_len_of,
    max_tokens_of,
    response_format_of,
    sampling_of,
    tool_choice_of,
    top_logprobs_of,
)
from hypnos_server.routes.responses_compaction import compaction_input, summary_message
from hypnos_server.routes.responses_tools import HOSTED_TOOLS, ToolSet, flat_name

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
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    top_logprobs: int | None = None
    max_tool_calls: int | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    user: str | None = None
    include: list[str] | None = None
    conversation: str | dict[str, Any] | None = None
    generate: bool = True  # false: a WebSocket prewarm, completed without output


LOGPROBS_INCLUDE = "message.output_text.logprobs"  # the `include` value that asks for the output's log probabilities


def wants_logprobs(body: ResponsesRequest) -> bool:
    """True when the output text carries token log probabilities: `include` names them, or `top_logprobs` asks
    for alternatives."""
    return LOGPROBS_INCLUDE in (body.include or ()) or bool(body.top_logprobs)


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
            if not isinstance(item.get("namespace"), str | None):
                raise invalid_request(f"Invalid value for `{where}.namespace`: the name of a namespace tool")
            items.append({**item, "arguments": arguments, "id": item.get("id") or item_id("fc"), "status": "completed"})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise invalid_request(f"`{where}` (function_call_output) needs `call_id`")
            items.append({**item, "id": item.get("id") or item_id("fco"), "status": "completed"})
        elif kind in ("compaction", "compaction_summary"):
            items.append(compaction_input(item, where))
        elif kind == "reasoning":
            continue  # thoughts are never sent back to the model
        else:
            raise invalid_request(f"Invalid value for `{where}.type`: `{clip(kind)}` is not supported here")
    return items


def add_items(conversation: Conversation, instructions: str | None, items: list[dict[str, Any]]) -> None:
    """The conversation of `instructions` and items (inputs and earlier outputs, in order)."""
    if instructions:
        conversation.add("system", instructions)
    for index, item in enumerate(items):
        kind = item.get("type")
        last = conversation.messages[-1] if conversation.messages else None
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            _add_parts(conversation, conversation.add(role), item["content"], index)
        elif kind == "function_call":
            name = flat_name(item.get("namespace"), item["name"])
            call = ToolCall(id=item["call_id"], function=ToolCallFunction(name=name, arguments=item["arguments"]))
            if last is not None and last.role == "assistant":
                last.tool_calls.append(call)
                conversation.chars += len(call.function.arguments)
            else:
                conversation.add("assistant", tool_calls=[call])
        elif kind == "function_call_output":
            output = item.get("output", "")
            message = conversation.add("tool", tool_call_id=item["call_id"])
            if isinstance(output, str):
                conversation.text(message, output)
            else:
                _add_parts(conversation, message, output, index)
        elif kind == "compaction":
            conversation.add("user", summary_message(item))
    if not conversation.messages:
        raise invalid_request("`input` must hold at least one message")


def _add_parts(conversation: Conversation, message: InputMessage, content: list[Any], index: int) -> None:
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            conversation.text(message, str(part.get("text") or part.get("refusal") or ""))
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise invalid_request(f"`input[{index}]` input_image needs `image_url` (file ids are not supported)")
            conversation.image(message, url)
        elif kind == "input_audio":
            audio = part.get("input_audio") or {}
            if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
                raise invalid_request(f"`input[{index}]` input_audio needs `input_audio.data` (base64)")
            conversation.audio(message, audio["data"], audio.get("format") or "wav")
        else:
            raise invalid_request(f"Invalid value for `input[{index}].content`: unknown part `{clip(kind)}`")


def _tool_choice(
    choice: str | dict[str, Any] | None, tools: list[ToolDefinition], max_calls: int | None
) -> tuple[str, str | None, list[ToolDefinition]]:
    """(tool_choice, the function it forces, the functions the model sees): `allowed_tools` keeps the functions it
    names (`mode` auto or required); `max_tool_calls` 0 shows the model none."""
    if max_calls is not None and max_calls < 0:
        raise invalid_request("Invalid value for `max_tool_calls`: expected an integer >= 0")
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        tools = allowed_functions(choice.get("tools"), tools)
        choice = choice.get("mode", "auto")
        if choice not in ("auto", "required"):
            raise invalid_request('Invalid value for `tool_choice.mode`: "auto" or "required"')
        if choice == "required" and not tools:
            raise invalid_request("`tool_choice` requires a call, and its `allowed_tools` name no function")
    if max_calls == 0 and tools:
        if choice not in (None, "auto", "none"):
            raise invalid_request("`max_tool_calls` is 0: `tool_choice` cannot require a call")
        return "none", None, tools
    if choice is None or isinstance(choice, str):
        return (*tool_choice_of(choice, tools), tools)
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return (*tool_choice_of(None, tools, forced=flat_name(choice.get("namespace"), choice["name"])), tools)
    raise invalid_request(
        'Invalid value for `tool_choice`: "none", "auto", "required", a function by name or allowed_tools'
    )


def allowed_functions(wanted: Any, tools: list[ToolDefinition]) -> list[ToolDefinition]:
    """The functions an `allowed_tools` choice names (hosted tools among them skipped); 400 for a function that is
    not in `tools`."""
    if not isinstance(wanted, list):
        raise invalid_request("Invalid value for `tool_choice.tools`: an array of tools")
    declared = {tool.function.name for tool in tools}
    names = set()
    for index, tool in enumerate(wanted):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            if kind not in HOSTED_TOOLS:
                raise invalid_request(f"Invalid value for `tool_choice.tools[{index}].type`: `{clip(kind)}`")
            continue
        name = flat_name(tool.get("namespace"), str(tool.get("name")))
        if name not in declared:
            raise invalid_request(f"`tool_choice.tools[{index}]` names `{clip(name)}`, which is not in `tools`")
        names.add(name)
    return [tool for tool in tools if tool.function.name in names]


def _response_format(text: dict[str, Any] | None) -> ResponseFormat | None:
    wire = (text or {}).get("format")
    if wire is None:
        return None
    if not isinstance(wire, dict):
        raise invalid_request("Invalid value for `text.format`: an object with `type`")
    kind = str(wire.get("type", "text"))
    if kind != "json_schema":
        return response_format_of(kind, None, None, None)
    return response_format_of(kind, wire.get("name"), wire.get("schema"), wire.get("strict"))


def responses_request(
    body: ResponsesRequest,
    items: list[dict[str, Any]],
    limits: LimitsConfig,
    tools: ToolSet,
    extra: tuple[str, ...] = (),
) -> ChatRequest:
    """The ChatRequest of a Responses body whose conversation is `items` (history and input) with the functions of
    `tools`, then `extra` user messages (compaction's request)."""
    conversation = Conversation(limits)
    add_items(conversation, body.instructions, items)
    for text in extra:
        conversation.add("user", text)
    messages = conversation.checked()
    effort = (body.reasoning or {}).get("effort")
    thinking, budget = thinking_of(effort if isinstance(effort, str) else None)
    functions: list[ToolDefinition] = checked_tools(tools.functions)
    tool_choice, forced, functions = _tool_choice(body.tool_choice, functions, body.max_tool_calls)
    chat = ChatInput(
        messages=messages,
        # unset: as long as the server allows (OpenAI's Responses: the model's limit), not chat's 512; Codex CLI sends
        # none and fails its turn on an incomplete response
        max_tokens=max_tokens_of(body.max_output_tokens, limits, "max_output_tokens", default=limits.max_tokens_cap),
        sampling=sampling_of(
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            seed=body.seed,
            presence_penalty=body.presence_penalty,
            frequency_penalty=body.frequency_penalty,
        ),
        tools=functions,
        tool_choice=tool_choice,
        forced_tool=forced,
        thinking=thinking,
        thinking_budget=budget,
        context_len=context_len_of(body.num_ctx),
        response_format=_response_format(body.text),
        logprobs=wants_logprobs(body),
        top_logprobs=top_logprobs_of(body.top_logprobs),
    )
    return conversation.request(body.model, chat, stream=body.stream)
