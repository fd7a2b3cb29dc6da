"""The SSE body of a streamed chat (section 7.4): role chunk, thoughts, content, tool calls, final chunk, [DONE]."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from hypnos.engine import ChatFinished, ChatOptions, ContentDelta, ReasoningDelta, ToolCallEvent
from hypnos.errors import HypnosError, clip
from hypnos.openai import ChatCompletionRequest
from hypnos.scheduler import Lease

from hypnos_server.observability.capture import prompt_text
from hypnos_server.routes.inference import engine_failed_message
from hypnos_server.state import RequestContext

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"


def usage_object(finished: ChatFinished) -> dict[str, Any]:
    """The usage object; prompt_tokens_details only when some prompt tokens were cached."""
    usage: dict[str, Any] = {
        "prompt_tokens": finished.prompt_tokens,
        "completion_tokens": finished.completion_tokens,
        "total_tokens": finished.prompt_tokens + finished.completion_tokens,
    }
    if finished.cached_tokens > 0:
        usage["prompt_tokens_details"] = {"cached_tokens": finished.cached_tokens}
    return usage


class ChunkWriter:
    """Builds the chat.completion.chunk events of one stream."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}

    def event(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        """One `data: {...}` event with a single choice."""
        chunk = {**self.head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}], **extra}
        return b"data: " + msgspec.json.encode(chunk) + b"\n\n"


async def sse_body(
    context: RequestContext,
    lease: Lease,
    body: ChatCompletionRequest,
    options: ChatOptions,
    completion_id: str,
    created: int,
) -> AsyncIterator[bytes]:
    """Stream the engine's events as SSE; a failure after the headers becomes a finish_reason "error" chunk."""
    writer = ChunkWriter(completion_id, created, body.model)
    record = context.record
    yield writer.event({"role": "assistant", "content": ""})
    started = time.perf_counter()
    tool_index = 0
    finished: ChatFinished | None = None
    output: list[str] = []  # observability: the answer text for the request log
    try:
        async for event in lease.engine.chat(body, options, lease.cancel):
            if isinstance(event, ContentDelta):
                if event.text:
                    output.append(event.text)
                    yield writer.event({"content": event.text})
            elif isinstance(event, ReasoningDelta):
                if event.text:
                    yield writer.event({"reasoning_content": event.text})
            elif isinstance(event, ToolCallEvent):
                call = event.call
                entry = {
                    "index": tool_index,
                    "id": call.id,
                    "type": call.type,
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
                tool_index += 1
                yield writer.event({"tool_calls": [entry]})
            elif isinstance(event, ChatFinished):
                finished = event
        if finished is None:
            raise HypnosError(500, "server_error", f"The model `{body.model}` ended its answer without finishing")
    except Exception as error:
        if isinstance(error, HypnosError):
            message, kind = error.message, error.type
        else:
            logger.error("chat stream on %s failed", clip(body.model), exc_info=error)
            message, kind = engine_failed_message(body.model), "server_error"
        record.error, record.error_type = message, kind
        yield writer.event({}, "error", error={"message": message, "type": kind})
        yield DONE
        return
    inference_ms = (time.perf_counter() - started) * 1000
    record.tokens_in, record.tokens_out = finished.prompt_tokens, finished.completion_tokens
    record.cached_tokens = finished.cached_tokens
    telemetry = lease.telemetry(finished.timing, inference_ms)
    record.telemetry, record.input_text, record.output_text = telemetry, prompt_text(body.messages), "".join(output)
    yield writer.event({}, finished.finish_reason, usage=usage_object(finished), hypnos_telemetry=telemetry)
    yield DONE
