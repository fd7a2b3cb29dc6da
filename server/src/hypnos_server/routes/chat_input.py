"""The wire chat request (section 7.1) mapped to the one internal ChatRequest (see chat_request.py)."""

from __future__ import annotations

from hypnos.chat import ChatInput
from hypnos.config import LimitsConfig
from hypnos.errors import invalid_request
from hypnos.openai import ChatCompletionRequest, ChatMessage, ToolChoiceObject

from hypnos_server.routes.chat_request import (
    ROLES,
    ChatRequest,
    Conversation,
    checked_tools,
    context_len_of,
    max_tokens_of,
    n_of,
    response_format_of,
    sampling_of,
    stop_of,
    tool_choice_of,
    top_logprobs_of,
)

THINKING_BUDGETS = {"low": 512, "minimal": 512, "medium": 2048, "high": 6144}

__all__ = ["ROLES", "THINKING_BUDGETS", "add_chat_message", "chat_completion_request", "thinking_of"]


def add_chat_message(conversation: Conversation, message: ChatMessage) -> None:
    """One chat message (text, image_url and input_audio parts, tool calls, a tool result) added as it stands."""
    added = conversation.add(
        message.role, name=message.name, tool_calls=message.tool_calls, tool_call_id=message.tool_call_id
    )
    if isinstance(message.content, str):
        conversation.text(added, message.content)
        return
    for part in message.content or []:
        if part.type == "text":
            conversation.text(added, part.text or "")
        elif part.type == "image_url" and part.image_url is not None:
            conversation.image(added, part.image_url.url)
        elif part.type == "input_audio" and part.input_audio is not None:
            conversation.audio(added, part.input_audio.data, part.input_audio.format)
        else:
            raise invalid_request(f"Invalid value for `{conversation.where}.content`: unknown part `{part.type}`")


def thinking_of(effort: str | None, think: bool | None = None) -> tuple[bool, int | None]:
    """(thinking, budget) of `reasoning_effort` (a named budget, or "none"), else of `think`."""
    if effort is None:
        return bool(think), None
    if effort == "none":
        return False, None
    if effort not in THINKING_BUDGETS:
        raise invalid_request(f"Invalid value for `reasoning_effort`: `{effort}`")
    return True, THINKING_BUDGETS[effort]


def repeat_penalty_of(body: ChatCompletionRequest) -> tuple[str, float | None]:
    """The repetition penalty the request sent and the name it used: vLLM's `repetition_penalty`, else llama.cpp's
    `repeat_penalty`."""
    if body.repetition_penalty is None and body.repeat_penalty is not None:
        return "repeat_penalty", body.repeat_penalty
    return "repetition_penalty", body.repetition_penalty


def chat_completion_request(body: ChatCompletionRequest, limits: LimitsConfig) -> ChatRequest:
    """The ChatRequest of a chat completions body: messages checked against section 1's limits, options checked,
    max_tokens clamped, thinking decided (media loaded later, by ChatRequest.load)."""
    if not body.messages:
        raise invalid_request("`messages` must be a non-empty array")
    conversation = Conversation(limits)
    for message in body.messages:
        add_chat_message(conversation, message)
    messages = conversation.checked()
    requested = body.max_tokens if body.max_tokens is not None else body.max_completion_tokens
    max_tokens = max_tokens_of(requested, limits)
    context_len = context_len_of(body.num_ctx)
    tools = checked_tools(body.tools)
    choice = body.tool_choice
    if isinstance(choice, ToolChoiceObject):
        tool_choice, forced = tool_choice_of(None, tools, forced=choice.function.name)
    else:
        tool_choice, forced = tool_choice_of(choice, tools)
    thinking, budget = thinking_of(body.reasoning_effort, body.think)
    wire_format = body.response_format
    schema = None if wire_format is None else wire_format.json_schema
    chat = ChatInput(
        messages=messages,
        max_tokens=max_tokens,
        sampling=sampling_of(
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            seed=body.seed,
            presence_penalty=body.presence_penalty,
            frequency_penalty=body.frequency_penalty,
            logit_bias=body.logit_bias,
            repeat_penalty=repeat_penalty_of(body),
        ),
        tools=tools,
        tool_choice=tool_choice,
        forced_tool=forced,
        thinking=thinking,
        thinking_budget=budget,
        context_len=context_len,
        response_format=None
        if wire_format is None
        else response_format_of(
            wire_format.type,
            None if schema is None else schema.name,
            None if schema is None else schema.schema,
            None if schema is None else schema.strict,
        ),
        stop=stop_of(body.stop),
        n=n_of(body.n),
        logprobs=bool(body.logprobs),
        top_logprobs=top_logprobs_of(body.top_logprobs),
    )
    return conversation.request(body.model, chat, stream=body.stream)
