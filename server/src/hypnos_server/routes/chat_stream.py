"""Chat answers (section 7): one accumulator of engine events for whole and streamed answers; the SSE body."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from hypnos.chat import ChatInput
from hypnos.engine import (
    ChatAccepted,
    ChatEvent,
    ChatFinished,
    ContentDelta,
    ReasoningDelta,
    TokenLogprob,
    ToolCallEvent,
)
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


class Choice:
    """What one choice's events add up to: text, thoughts, tool calls, log probabilities, how it ended."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.text: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[ToolCall] = []
        self.logprobs: list[TokenLogprob] = []
        self.finished: ChatFinished | None = None

    def message(self) -> dict[str, Any]:
        """The assistant message of a whole answer (`refusal` and `annotations` as OpenAI's, which are never set)."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.text),
            "refusal": None,
            "annotations": [],
        }
        if self.thoughts:
            message["reasoning_content"] = "".join(self.thoughts)
        if self.calls:
            message["tool_calls"] = self.calls
        return message


class ChatAccumulator:
    """What a chat's events add up to, per choice: text, thoughts, tool calls and the final usage, however the
    answer ends."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.reset()

    def reset(self) -> None:
        """Forget what was taken (an attempt retried after a device OOM starts over)."""
        self.choices: dict[int, Choice] = {}
        self.deltas = 0  # pieces seen: the completion tokens charged when the engine never reported usage

    def choice(self, index: int) -> Choice:
        """Choice `index` (created on its first event)."""
        if index not in self.choices:
            self.choices[index] = Choice(index)
        return self.choices[index]

    @property
    def text(self) -> list[str]:
        """The first choice's answer pieces."""
        return self.choice(0).text

    def add(self, event: ChatEvent) -> None:
        """Take one engine event (a ChatAccepted adds nothing to the answer)."""
        if isinstance(event, ChatAccepted):
            return
        choice = self.choice(event.index)
        if isinstance(event, ContentDelta):
            choice.text.append(event.text)
            choice.logprobs.extend(event.logprobs or [])
            self.deltas += 1
        elif isinstance(event, ReasoningDelta):
            choice.thoughts.append(event.text)
            self.deltas += 1
        elif isinstance(event, ToolCallEvent):
            choice.calls.append(event.call)
            self.deltas += 1
        elif isinstance(event, ChatFinished):
            choice.finished = event

    async def collect(self, events: AsyncIterator[ChatEvent]) -> ChatFinished:
        """Take every event of an answer (from scratch); its ChatFinished (500 when the engine ended without one)."""
        self.reset()
        async for event in events:
            self.add(event)
        return self.final()

    def final(self) -> ChatFinished:
        """The answer's usage over all choices (the prompt once, every choice's completion tokens) with the first
        choice's finish_reason; 500 when the engine ended without finishing."""
        done = [choice.finished for choice in self.ordered() if choice.finished is not None]
        if not done:
            raise HypnosError(500, "server_error", f"The model `{self.model}` ended its answer without finishing")
        first, last = done[0], max(done, key=lambda finished: finished.timing.decode_ms or 0.0)
        return ChatFinished(
            finish_reason=first.finish_reason,
            prompt_tokens=first.prompt_tokens,
            completion_tokens=sum(finished.completion_tokens for finished in done),
            cached_tokens=first.cached_tokens,
            timing=last.timing,
            stop_sequence=first.stop_sequence,
        )

    def ordered(self) -> list[Choice]:
        """The choices in index order."""
        return [self.choices[index] for index in sorted(self.choices)]

    def record_usage(self, run: InferenceRun, chat: ChatInput) -> None:
        """Charge what was generated (also for an answer cut short) and keep the exchange for the request log."""
        record = run.record
        if any(choice.finished is not None for choice in self.choices.values()):
            finished = self.final()
            record.tokens_in, record.tokens_out = finished.prompt_tokens, finished.completion_tokens
            record.cached_tokens = finished.cached_tokens
        else:
            record.tokens_out = max(record.tokens_out, self.deltas)
        record.input_text = "\n".join(f"{m.role}: {m.text()}" for m in chat.messages)  # observability
        record.output_text = "".join(self.text)

    def message(self) -> dict[str, Any]:
        """The first choice's assistant message."""
        return self.choice(0).message()

    def choice_objects(self, chat: ChatInput) -> list[dict[str, Any]]:
        """The `choices` of a whole answer, with `logprobs` when the request asked for them."""
        objects = []
        for choice in self.ordered():
            reason = choice.finished.finish_reason if choice.finished is not None else "error"
            entry: dict[str, Any] = {"index": choice.index, "message": choice.message(), "finish_reason": reason}
            if chat.logprobs:
                entry["logprobs"] = {"content": choice.logprobs}
            objects.append(entry)
        return objects


class ChunkWriter:
    """Builds the chat.completion.chunk events of one stream."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
        self.tool_index: dict[int, int] = {}

    def event(
        self,
        delta: dict[str, Any],
        finish_reason: str | None = None,
        index: int = 0,
        logprobs: list[TokenLogprob] | None = None,
        **extra: Any,
    ) -> bytes:
        """One `data: {...}` event with a single choice."""
        choice: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish_reason}
        if logprobs is not None:
            choice["logprobs"] = {"content": logprobs}
        return self.raw({**self.head, "choices": [choice], **extra})

    def raw(self, chunk: dict[str, Any]) -> bytes:
        """One `data: {...}` event of an already shaped chunk."""
        return b"data: " + msgspec.json.encode(chunk) + b"\n\n"

    def delta(self, event: ChatEvent) -> bytes | None:
        """The chunk of one content, reasoning or tool-call event (None for empty pieces and the final event)."""
        if isinstance(event, ContentDelta):
            if not event.text:
                return None
            return self.event({"content": event.text}, index=event.index, logprobs=event.logprobs)
        if isinstance(event, ReasoningDelta):
            return self.event({"reasoning_content": event.text}, index=event.index) if event.text else None
        if isinstance(event, ToolCallEvent):
            call = event.call
            number = self.tool_index.get(event.index, 0)
            entry = {
                "index": number,
                "id": call.id,
                "type": call.type,
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            self.tool_index[event.index] = number + 1
            return self.event({"tool_calls": [entry]}, index=event.index)
        return None


async def sse_body(
    run: InferenceRun,
    chat: ChatInput,
    answer: ChatAccumulator,
    completion_id: str,
    created: int,
    include_usage: bool = False,
) -> AsyncIterator[bytes]:
    """Stream the engine's events as SSE; nothing is sent before the engine's first event (an error it knows before
    its first token stays an HTTP error, a device OOM a 507 after one retry); a failure after that becomes a
    finish_reason "error" chunk."""
    writer = ChunkWriter(completion_id, created, run.model)
    record = run.record
    try:  # a device OOM before the first event evicts idle models and starts the stream once more
        events, first = await run.lease.first_with_oom_retry(lambda engine: engine.chat(chat, run.lease.cancel))
        for index in range(max(1, chat.n)):
            yield writer.event({"role": "assistant", "content": ""}, index=index)
        held: ChatFinished | None = None  # the last choice's end goes out with the usage
        try:
            event = first
            while event is not None:
                answer.add(event)
                if isinstance(event, ChatFinished):
                    if held is not None:
                        yield writer.event({}, held.finish_reason, index=held.index)
                    held = event
                else:
                    chunk = writer.delta(event)
                    if chunk is not None:
                        yield chunk
                event = await anext(events, None)
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
    last = held if held is not None else finished
    usage = usage_object(finished)
    # Usage comes once: on the final chunk (the spec's default), or, asked for with include_usage, on OpenAI's own
    # usage chunk only (clients that add up every chunk's usage, as LangChain does, count it once)
    final_usage = None if include_usage else usage
    yield writer.event({}, last.finish_reason, index=last.index, usage=final_usage, hypnos_telemetry=telemetry)
    if include_usage:  # OpenAI's usage chunk: no choices
        yield writer.raw({**writer.head, "choices": [], "usage": usage})
    yield DONE
