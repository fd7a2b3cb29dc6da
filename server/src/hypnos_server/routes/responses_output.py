"""Responses objects: the Response of a request, its output items from a chat answer, and its usage."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hypnos.engine import ChatFinished
from hypnos.openai import ToolCall

from hypnos_server.routes.chat_stream import Choice
from hypnos_server.routes.responses_conversation import conversation_id
from hypnos_server.routes.responses_input import ResponsesRequest, item_id
from hypnos_server.routes.responses_tools import ToolSet, read_tools

SERVICE_TIER = "default"  # the one tier Hypnos has: every request is scheduled alike


def text_field(text: dict[str, Any] | None) -> dict[str, Any]:
    """The request's `text` in the spec's TextField shape: a format always, a json_schema one with every field."""
    wire = (text or {}).get("format")
    if not isinstance(wire, dict):
        return {**(text or {}), "format": {"type": "text"}}
    if wire.get("type") == "json_schema":
        description = wire.get("description")
        wire = {
            **wire,
            "name": str(wire.get("name") or "response"),
            "description": description if isinstance(description, str) else None,
            "schema": wire.get("schema"),
            "strict": bool(wire.get("strict")),
        }
    return {**(text or {}), "format": wire}


@dataclass
class ResponseMeta:
    """What a Response echoes of its request, fixed when the request arrives; `tools`: what its tools mean here."""

    body: ResponsesRequest
    id: str = field(default_factory=lambda: item_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    tools: ToolSet = field(init=False)
    conversation: str | None = field(init=False)  # the id of the conversation the response belongs to

    def __post_init__(self) -> None:
        self.tools = read_tools(self.body.tools)
        self.tools.max_calls = self.body.max_tool_calls
        self.conversation = conversation_id(self.body.conversation, self.body.previous_response_id)

    def response(
        self,
        status: str,
        output: list[dict[str, Any]] | None = None,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        incomplete: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The Response object in this state: every field of the spec's ResponseResource, with its type."""
        body = self.body
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": int(time.time()) if status == "completed" else None,
            "status": status,
            "background": body.background,
            "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "metadata": body.metadata or {},
            "model": body.model,
            "output": output or [],
            "parallel_tool_calls": True if body.parallel_tool_calls is None else body.parallel_tool_calls,
            "previous_response_id": body.previous_response_id,
            "reasoning": {
                "effort": (body.reasoning or {}).get("effort"),
                "summary": (body.reasoning or {}).get("summary"),
            },
            "store": body.store,
            "temperature": 1.0 if body.temperature is None else body.temperature,
            "text": text_field(body.text),
            "tool_choice": body.tool_choice or "auto",
            "tools": self.tools.echo,
            "top_p": 1.0 if body.top_p is None else body.top_p,
            "presence_penalty": body.presence_penalty or 0.0,
            "frequency_penalty": body.frequency_penalty or 0.0,
            "top_logprobs": body.top_logprobs or 0,
            "max_tool_calls": body.max_tool_calls,
            "service_tier": SERVICE_TIER,
            "safety_identifier": body.safety_identifier,
            "prompt_cache_key": body.prompt_cache_key,
            "user": body.user,
            "conversation": {"id": self.conversation} if self.conversation else None,
            "truncation": "disabled",
            "usage": usage,
            **extra,
        }


def usage_of(finished: ChatFinished) -> dict[str, Any]:
    """Responses usage: input and output tokens, with the cached prompt tokens always stated."""
    return {
        "input_tokens": finished.prompt_tokens,
        "input_tokens_details": {"cached_tokens": finished.cached_tokens},
        "output_tokens": finished.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": finished.prompt_tokens + finished.completion_tokens,
    }


def status_of(finish_reason: str) -> tuple[str, str | None]:
    """The Response status (and incomplete reason) of a chat finish_reason."""
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    return "completed", None


def reasoning_item(ident: str, thoughts: str, summary: bool) -> dict[str, Any]:
    """A reasoning item: the thoughts as reasoning text (and as its summary when the request asked for one)."""
    return {
        "type": "reasoning",
        "id": ident,
        "summary": [{"type": "summary_text", "text": thoughts}] if summary else [],
        "content": [{"type": "reasoning_text", "text": thoughts}],
    }


def message_item(ident: str, text: str, status: str = "completed", logprobs: list[Any] | None = None) -> dict[str, Any]:
    """An assistant message item holding one output_text part (with its tokens' log probabilities, when asked)."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
    return {"type": "message", "id": ident, "status": status, "role": "assistant", "content": [part]}


def call_item(ident: str, call: ToolCall, status: str = "completed") -> dict[str, Any]:
    """A function_call item for one tool call."""
    return {
        "type": "function_call",
        "id": ident,
        "call_id": call.id,
        "name": call.function.name,
        "arguments": call.function.arguments,
        "status": status,
    }


def output_items(choice: Choice, summary: bool, tools: ToolSet) -> list[dict[str, Any]]:
    """A whole answer's output items: reasoning, the message (also when empty and there are no calls), calls (named
    as the client declared them, up to `max_tool_calls`)."""
    items = []
    if choice.thoughts:
        items.append(reasoning_item(item_id("rs"), "".join(choice.thoughts), summary))
    text = "".join(choice.text)
    calls = [call for made, call in enumerate(choice.calls) if tools.keeps(made)]
    if text or not calls:
        reason = choice.finished.finish_reason if choice.finished is not None else "stop"
        status = "incomplete" if reason == "length" else "completed"
        items.append(message_item(item_id("msg"), text, status, choice.logprobs))
    items.extend(tools.name_call(call_item(item_id("fc"), call)) for call in calls)
    return items


def conversation_items(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output items a later turn sends back to the model: messages and calls (never the thoughts)."""
    return [item for item in output if item.get("type") in ("message", "function_call")]
