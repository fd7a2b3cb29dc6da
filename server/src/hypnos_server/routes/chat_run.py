"""What the chat-shaped routes (chat completions, Anthropic Messages, Responses) share once their run is open: the
event stream whose first chunk is awaited before the headers go, and a whole answer collected to its end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from hypnos.chat import ChatInput
from hypnos.engine import ChatFinished
from litestar.response import Stream

from hypnos_server.routes.chat_stream import ChatAccumulator
from hypnos_server.routes.inference import InferenceRun


async def event_stream(run: InferenceRun, chunks: AsyncIterator[bytes]) -> Stream:
    """A text/event-stream response of `chunks`; an error known before the first one is still an HTTP error."""
    first = await anext(chunks)
    return Stream(
        _prepend(first, chunks), media_type="text/event-stream", headers={"cache-control": "no-cache", **run.headers()}
    )


async def whole_answer(
    run: InferenceRun, chat: ChatInput, answer: ChatAccumulator
) -> tuple[ChatFinished, Any, dict[str, str]]:
    """Run the chat to its end into `answer` (its usage recorded even when it fails), then close the run; the
    finish, the response's hypnos_telemetry and its headers."""
    try:
        try:
            finished = await run.call(lambda engine: answer.collect(engine.chat(chat, run.lease.cancel)))
        finally:
            answer.record_usage(run, chat)
        return finished, run.telemetry(finished.timing), run.headers()
    finally:
        await run.close()


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for chunk in rest:
        yield chunk
