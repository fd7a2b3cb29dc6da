"""The one runner below every chat-shaped wire format (chat completions, Anthropic Messages, Responses, realtime): a
ChatRequest's media loaded, its model leased, its answer run whole or as a stream whose first chunk is awaited
before the headers go; a wire format only shapes the events and the answer."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from hypnos.chat import ChatInput
from hypnos.engine import ChatEvent, ChatFinished
from litestar import Request
from litestar.response import Stream

from hypnos_server.routes.chat_request import ChatRequest
from hypnos_server.routes.chat_stream import ChatAccumulator
from hypnos_server.routes.inference import Caller, InferenceRun

SSE_KEEPALIVE = b": keepalive\n\n"  # an SSE comment: clients skip it (the spec's keep-alive)


class ChatRun:
    """One ChatRequest's way through its model: `open()`, then `whole()` or `respond(body)` (or `events()` for a
    caller that shapes events itself, like realtime); the model checked at once (404, disabled, modality)."""

    def __init__(self, caller: Request[Any, Any, Any] | Caller, request: ChatRequest) -> None:
        self.request = request
        self.chat: ChatInput = request.chat
        self.run = InferenceRun(caller, request.model, request.modalities)
        if self.run.state.settings.server.prompt_cache_isolation == "key":  # cached prompts stay with their key
            key = self.run.context.key
            self.chat.cache_scope = key.label if key is not None else ""
        batch = self.run.context.batch
        if batch is not None:  # a batch line: the engine runs it in what interactive answers leave
            self.chat.priority = batch.priority
        self.answer = ChatAccumulator(request.model)

    @property
    def model(self) -> str:
        """The model id the client asked for."""
        return self.request.model

    async def open(self) -> None:
        """Load the request's media, then lease the model (on a Ray cluster the node starts the chat with it)."""
        await self.request.load(self.run.state.settings.limits)
        await self.run.open(stream=("chat", self.chat))

    async def whole(self) -> tuple[ChatFinished, Any, dict[str, str]]:
        """Run the chat to its end into `answer` (its usage recorded even when it fails), then close the run; the
        finish, the response's hypnos_telemetry and its headers."""
        run, chat, answer = self.run, self.chat, self.answer
        try:
            try:
                finished = await run.call(lambda engine: answer.collect(engine.chat(chat, run.lease.cancel)))
            finally:
                answer.record_usage(run, chat)
            return finished, run.telemetry(finished.timing), run.headers()
        finally:
            await run.close()

    async def respond(self, body: Callable[[], AsyncIterator[bytes]], headers: dict[str, str] | None = None) -> Stream:
        """A text/event-stream response of `body()` (produced to its end even if the client leaves, an SSE comment
        whenever it is silent for KEEPALIVE_SECS); an error known before its first chunk is still an HTTP error."""
        chunks = self.run.stream(lambda _lease: body(), keepalive=SSE_KEEPALIVE)
        first = await anext(chunks)
        return Stream(
            _prepend(first, chunks),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", **self.run.headers(), **(headers or {})},
        )

    async def events(self) -> AsyncGenerator[ChatEvent, None]:
        """The engine's events of the answer, each taken into `answer`; the usage recorded however it ends. A device
        OOM before the first event (nothing was sent) evicts the idle models and starts the answer once more."""
        run = self.run
        events: AsyncGenerator[ChatEvent, None] | None = None
        try:
            events, first = await run.lease.first_with_oom_retry(
                lambda engine: engine.chat(self.chat, run.lease.cancel)
            )
            if first is not None:
                self.answer.add(first)
                yield first
                async for event in events:
                    self.answer.add(event)
                    yield event
        finally:
            aclose = getattr(events, "aclose", None)  # an engine's own iterator may have none
            if aclose is not None:
                await aclose()
            self.answer.record_usage(run, self.chat)

    async def close(self) -> None:
        """Let the model go (idempotent; the request's end does it too)."""
        await self.run.close()


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for chunk in rest:
        yield chunk
