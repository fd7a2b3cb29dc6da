"""Chat answers (section 7): one accumulator of engine events for whole and streamed answers; the SSE body."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from hypnos.chat import ChatInput
from hypnos.engine import ChatEvent, ChatFinished, ContentDelta, ReasoningDelta, ToolCallEvent
from hypnos.errors import HypnosError, clip
from hypnos.openai import ToolCall

from hypnos_server.routes.inference import InferenceRun, engine_failed_message

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


class ChatAccumulator:
    """What a chat's events add up to: text, thoughts, tool calls and the final usage, however the answer ends."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.reset()

    def reset(self) -> None:
        """Forget what was taken (an attempt retried after a device OOM starts over)."""
        self.text: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[ToolCall] = []
        self.finished: ChatFinished | None = None
        self.deltas = 0  # pieces seen: the completion tokens charged when the engine never reported usage

    def add(self, event: ChatEvent) -> None:
        """Take one engine event."""
        if isinstance(event, ContentDelta):
            self.text.append(event.text)
            self.deltas += 1
        elif isinstance(event, ReasoningDelta):
            self.thoughts.append(event.text)
            self.deltas += 1
        elif isinstance(event, ToolCallEvent):
            self.calls.append(event.call)
            self.deltas += 1
        elif isinstance(event, ChatFinished):
            self.finished = event

    async def collect(self, events: AsyncIterator[ChatEvent]) -> ChatFinished:
        """Take every event of an answer (from scratch); its ChatFinished (500 when the engine ended without one)."""
        self.reset()
        async for event in events:
            self.add(event)
        return self.final()

    def final(self) -> ChatFinished:
        """The answer's ChatFinished (500 when the engine ended without one)."""
        if self.finished is None:
            raise HypnosError(500, "server_error", f"The model `{self.model}` ended its answer without finishing")
        return self.finished

    def record_usage(self, run: InferenceRun, chat: ChatInput) -> None:
        """Charge what was generated (also for an answer cut short) and keep the exchange for the request log."""
        record = run.record
        if self.finished is not None:
            record.tokens_in, record.tokens_out = self.finished.prompt_tokens, self.finished.completion_tokens
            record.cached_tokens = self.finished.cached_tokens
        else:
            record.tokens_out = max(record.tokens_out, self.deltas)
        record.input_text = "\n".join(f"{m.role}: {m.text()}" for m in chat.messages)  # observability
        record.output_text = "".join(self.text)

    def message(self) -> dict[str, Any]:
        """The assistant message of a whole answer."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text)}
        if self.thoughts:
            message["reasoning_content"] = "".join(self.thoughts)
        if self.calls:
            message["tool_calls"] = self.calls
        return message


class ChunkWriter:
    """Builds the chat.completion.chunk events of one stream."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
        self.tool_index = 0

    def event(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        """One `data: {...}` event with a single choice."""
        chunk = {**self.head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}], **extra}
        return b"data: " + msgspec.json.encode(chunk) + b"\n\n"

    def delta(self, event: ChatEvent) -> bytes | None:
        """The chunk of one content, reasoning or tool-call event (None for empty pieces and the final event)."""
        if isinstance(event, ContentDelta):
            return self.event({"content": event.text}) if event.text else None
        if isinstance(event, ReasoningDelta):
            return self.event({"reasoning_content": event.text}) if event.text else None
        if isinstance(event, ToolCallEvent):
            call = event.call
            entry = {
                "index": self.tool_index,
                "id": call.id,
                "type": call.type,
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            self.tool_index += 1
            return self.event({"tool_calls": [entry]})
        return None


async def sse_body(
    run: InferenceRun, chat: ChatInput, answer: ChatAccumulator, completion_id: str, created: int
) -> AsyncIterator[bytes]:
    """Stream the engine's events as SSE; a failure after the headers becomes a finish_reason "error" chunk."""
    writer = ChunkWriter(completion_id, created, run.model)
    record = run.record
    yield writer.event({"role": "assistant", "content": ""})
    try:
        async for event in run.engine.chat(chat, run.lease.cancel):
            answer.add(event)
            chunk = writer.delta(event)
            if chunk is not None:
                yield chunk
        finished = answer.final()
    except Exception as error:
        if isinstance(error, HypnosError):
            message, kind = error.message, error.type
        else:
            logger.error("chat stream on %s failed", clip(run.model), exc_info=error)
            message, kind = engine_failed_message(run.model), "server_error"
        record.error, record.error_type = message, kind
        yield writer.event({}, "error", error={"message": message, "type": kind})
        yield DONE
        return
    finally:
        answer.record_usage(run, chat)
    telemetry = run.telemetry(finished.timing)
    yield writer.event({}, finished.finish_reason, usage=usage_object(finished), hypnos_telemetry=telemetry)
    yield DONE
