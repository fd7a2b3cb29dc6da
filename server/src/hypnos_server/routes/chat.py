"""POST /v1/chat/completions (section 7): validation, options, the non-streaming answer; streams in chat_stream."""

from __future__ import annotations

import secrets
import time
from typing import Any

from hypnos.config import LimitsConfig
from hypnos.engine import ChatFinished, ChatOptions, ContentDelta, ReasoningDelta, ToolCallEvent
from hypnos.errors import HypnosError, invalid_request
from hypnos.image_header import check_image_pixels
from hypnos.media import decode_base64, decode_data_url
from hypnos.openai import ChatCompletionRequest, ToolCall
from hypnos.types import Modality
from litestar import Request, Response, post
from litestar.response import Stream

from hypnos_server.observability.capture import prompt_text
from hypnos_server.routes.chat_stream import sse_body, usage_object
from hypnos_server.routes.inference import (
    LeasedStream,
    call_engine,
    decode_json,
    json_response,
    lease_for,
    note_lease,
    ready_guard,
    wait_headers,
)
from hypnos_server.state import hypnos_state, request_context
from hypnos_server.wav import check_wav

DEFAULT_MAX_TOKENS = 512
ROLES = {"system", "user", "assistant", "tool", "developer"}
THINKING_BUDGETS = {"low": 512, "minimal": 512, "medium": 2048, "high": 6144}
TOOL_CHOICES = {"none", "auto", "required"}
MAX_SCHEMA_DEPTH = 64  # nesting of a tool's parameters schema; far beyond any real one, far below recursion limits


def _data_url_bytes(url: str) -> int:
    """The decoded size of a base64 data: URL (an estimate from its length)."""
    _, _, payload = url.partition(",")
    return len(payload) * 3 // 4


def required_modalities(body: ChatCompletionRequest, limits: LimitsConfig) -> list[Modality]:
    """Validate the messages against section 1's limits; the modalities the model must serve."""
    if not body.messages:
        raise invalid_request("`messages` must be a non-empty array")
    needed = [Modality.TEXT_GENERATION]
    chars = 0
    for index, message in enumerate(body.messages):
        if message.role not in ROLES:
            raise invalid_request(f"Invalid value for `messages[{index}].role`: unknown role `{message.role}`")
        chars += len(message.text())
        for call in message.tool_calls or []:
            chars += len(call.function.arguments)
        if not isinstance(message.content, list):
            continue
        for part in message.content:
            if part.type == "text":
                continue
            if part.type == "image_url" and part.image_url is not None:
                _check_image(part.image_url.url, limits, index)
                if Modality.VISION not in needed:
                    needed.append(Modality.VISION)
            elif part.type == "input_audio" and part.input_audio is not None:
                if len(part.input_audio.data) * 3 // 4 > limits.max_audio_bytes:
                    raise invalid_request(f"`messages[{index}]` audio is larger than limits.max_audio_bytes")
                if part.input_audio.data.startswith("UklGR"):  # base64 of "RIFF": the header is checked here
                    check_wav(decode_base64(part.input_audio.data, max_bytes=limits.max_audio_bytes))
                if Modality.SPEECH_TO_TEXT not in needed:
                    needed.append(Modality.SPEECH_TO_TEXT)
            else:
                raise invalid_request(f"Invalid value for `messages[{index}].content`: unknown part `{part.type}`")
    if chars > limits.max_prompt_chars:
        raise invalid_request(f"The messages hold {chars} characters, above limits.max_prompt_chars")
    return needed


def _check_image(url: str, limits: LimitsConfig, index: int) -> None:
    if url.startswith("data:"):
        if _data_url_bytes(url) > limits.max_image_bytes:
            raise invalid_request(f"`messages[{index}]` image is larger than limits.max_image_bytes")
        image = decode_data_url(url, max_bytes=limits.max_image_bytes)
        check_image_pixels(image.data, limits.max_image_pixels, f"`messages[{index}]` image")
    elif url.startswith(("http://", "https://")):
        if not limits.allow_remote_image_urls:
            raise invalid_request("Remote image URLs are not allowed here (limits.allow_remote_image_urls)")
    else:
        raise invalid_request(f"Invalid value for `messages[{index}]` image_url: expected a data: or http(s) URL")


def chat_options(body: ChatCompletionRequest, limits: LimitsConfig) -> ChatOptions:
    """Max tokens (default 512, clamped to max_tokens_cap), thinking and context; tool_choice checked."""
    requested = body.max_tokens if body.max_tokens is not None else body.max_completion_tokens
    max_tokens = DEFAULT_MAX_TOKENS if requested is None else requested
    if max_tokens < 1:
        raise invalid_request("Invalid value for `max_tokens`: expected an integer >= 1")
    max_tokens = min(max_tokens, limits.max_tokens_cap)
    if body.num_ctx is not None and body.num_ctx < 1:
        raise invalid_request("Invalid value for `num_ctx`: expected an integer >= 1")
    _check_tools(body)
    effort = body.reasoning_effort
    if effort is not None:
        if effort == "none":
            return ChatOptions(max_tokens=max_tokens, thinking=False, context_len=body.num_ctx)
        if effort not in THINKING_BUDGETS:
            raise invalid_request(f"Invalid value for `reasoning_effort`: `{effort}`")
        return ChatOptions(
            max_tokens=max_tokens, thinking=True, thinking_budget=THINKING_BUDGETS[effort], context_len=body.num_ctx
        )
    return ChatOptions(max_tokens=max_tokens, thinking=bool(body.think), context_len=body.num_ctx)


def nesting_depth(value: Any) -> int:
    """How deeply dicts and lists nest in a decoded JSON value (iterative: no recursion to exhaust)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in children)
    return deepest


def _check_tools(body: ChatCompletionRequest) -> None:
    for index, tool in enumerate(body.tools or []):
        if nesting_depth(tool.function.parameters) > MAX_SCHEMA_DEPTH:
            raise invalid_request(
                f"Invalid value for `tools[{index}].function.parameters`: nested deeper than {MAX_SCHEMA_DEPTH}"
            )
    choice = body.tool_choice
    if isinstance(choice, str) and choice not in TOOL_CHOICES:
        raise invalid_request(f"Invalid value for `tool_choice`: `{choice}`")
    if choice is not None and not isinstance(choice, str):
        names = {tool.function.name for tool in body.tools or []}
        if choice.function.name not in names:
            raise invalid_request(f"`tool_choice` names `{choice.function.name}`, which is not in `tools`")


def completion_id() -> str:
    """A fresh `chatcmpl-<hex>` id."""
    return "chatcmpl-" + secrets.token_hex(12)


@post("/v1/chat/completions", guards=[ready_guard], status_code=200)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    """Answer a chat request, whole or as an SSE stream."""
    state = hypnos_state(request)
    context = request_context(request)
    body = await decode_json(request, ChatCompletionRequest)
    limits = state.settings.limits
    context.record.model = body.model
    context.record.stream = body.stream
    needed = required_modalities(body, limits)
    for modality in needed:
        state.scheduler.serving(body.model, modality)
    options = chat_options(body, limits)
    cid, created = completion_id(), int(time.time())
    lease_cm = lease_for(request, body.model, needed[-1])  # the media modality when there is one
    if body.stream:
        stream = LeasedStream(context, lease_cm, lambda lease: sse_body(context, lease, body, options, cid, created))
        lease = await stream.open()
        headers = {"cache-control": "no-cache", **wait_headers(lease)}
        return Stream(stream, media_type="text/event-stream", headers=headers)
    async with lease_cm as lease:
        note_lease(context, lease)
        started = time.perf_counter()
        text, thoughts, calls, finished = await call_engine(state, lease, lambda: _collect(lease, body, options))
        inference_ms = (time.perf_counter() - started) * 1000
        telemetry = lease.telemetry(finished.timing, inference_ms)
        headers = wait_headers(lease)
    record = context.record
    record.tokens_in, record.tokens_out = finished.prompt_tokens, finished.completion_tokens
    record.cached_tokens, record.inference_ms = finished.cached_tokens, round(inference_ms, 3)
    # observability: engine timings for /metrics, the exchange for the request log at debug
    record.telemetry, record.input_text, record.output_text = telemetry, prompt_text(body.messages), text
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if thoughts:
        message["reasoning_content"] = thoughts
    if calls:
        message["tool_calls"] = calls
    answer = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": body.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finished.finish_reason}],
        "usage": usage_object(finished),
        "hypnos_telemetry": telemetry,
    }
    return json_response(answer, headers=headers)


async def _collect(
    lease: Any, body: ChatCompletionRequest, options: ChatOptions
) -> tuple[str, str, list[ToolCall], ChatFinished]:
    text: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    finished: ChatFinished | None = None
    async for event in lease.engine.chat(body, options, lease.cancel):
        if isinstance(event, ContentDelta):
            text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            thoughts.append(event.text)
        elif isinstance(event, ToolCallEvent):
            calls.append(event.call)
        elif isinstance(event, ChatFinished):
            finished = event
    if finished is None:
        raise HypnosError(500, "server_error", f"The model `{body.model}` ended its answer without finishing")
    return "".join(text), "".join(thoughts), calls, finished


ROUTES = [chat_completions]
