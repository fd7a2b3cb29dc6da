"""GET /v1/responses over a WebSocket (the Open Responses WebSocket mode): each `response.create` message runs one
response whose events go out as the SSE stream's would, one JSON object per message; responses run one after the
other, and `previous_response_id` also finds this connection's earlier responses when they were not stored."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from typing import Any

import msgspec
from hypnos.engine import ChatFinished
from hypnos.errors import HypnosError, clip, staging
from litestar import WebSocket, websocket
from litestar.exceptions import WebSocketDisconnect
from litestar.types import HTTPDisconnectEvent

from hypnos_server.asgi.cors import OriginPolicy
from hypnos_server.asgi.keys import ApiKey
from hypnos_server.observability import observability_of
from hypnos_server.observability.payloads import BodyTee, body_tee
from hypnos_server.routes.chat_run import ChatRun
from hypnos_server.routes.inference import Caller
from hypnos_server.routes.responses import Conversation, LiveResponse, events_body
from hypnos_server.routes.responses_background import finish_detached
from hypnos_server.routes.responses_input import ResponsesRequest, responses_request
from hypnos_server.routes.responses_output import ResponseMeta, conversation_items, usage_of
from hypnos_server.routes.responses_stream import ResponseEvents, line_frame
from hypnos_server.state import HypnosState, RequestContext, RequestRecord, hypnos_state, new_request_id

logger = logging.getLogger(__name__)

PATH = "/v1/responses"
CLOSE_POLICY, CLOSE_TOO_BIG = 1008, 1009
KEPT_PER_CONNECTION = 16  # unstored responses a connection's later ones may continue from (the newest)
HTTP_ONLY = ("stream", "stream_options", "background")  # the spec: not sent over a socket (streaming is implicit)


def error_event(error: HypnosError) -> str:
    """The spec's WebSocketErrorEvent for an error."""
    detail = {"type": error.type, "code": error.code or error.type, "message": error.message, "param": error.param}
    return msgspec.json.encode({"type": "error", "status": error.status, "error": detail}).decode()


class ResponsesSocket:
    """One connection: its key, the responses it ran that a later one may continue, and the socket's state."""

    def __init__(self, socket: WebSocket[Any, Any, Any], state: HypnosState, key: ApiKey | None) -> None:
        self.socket, self.state, self.key = socket, state, key
        self.owner = key.label if key is not None else ""
        self.kept: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self.gone = asyncio.Event()
        self.tee: BodyTee | None = None  # the response under way's message and events, while the log is at trace

    async def serve(self) -> None:
        """Read `response.create` messages and answer each in turn until the client closes."""
        limit = self.state.settings.limits.max_body_bytes
        messages: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        reader = asyncio.ensure_future(self._read(messages))
        try:
            while (data := await messages.get()) is not None:
                if len(data) > limit:
                    too_big = HypnosError(413, "request_too_large", f"The message is above {limit} bytes")
                    await self.socket.send_text(error_event(too_big))
                    await self.socket.close(code=CLOSE_TOO_BIG)
                    return
                await self.answer(data)
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader

    async def _read(self, messages: asyncio.Queue[str | bytes | None]) -> None:
        while True:
            message = await self.socket.receive()
            if message["type"] == "websocket.disconnect":
                self.gone.set()
                await messages.put(None)
                return
            if message["type"] == "websocket.receive":
                await messages.put(message.get("text") or message.get("bytes") or b"")

    async def answer(self, data: str | bytes) -> None:
        """One client message: a `response.create` runs a response; anything else is an `error` event."""
        try:
            body = self._decode(data)
        except HypnosError as error:
            await self.socket.send_text(error_event(error))
            return
        record = RequestRecord(
            id=new_request_id(), method="GET", path=PATH, route=PATH, started_at=time.time(), key=self.owner or None
        )
        record.model, record.stream = body.model, True
        observability = observability_of(self.state)
        self.tee = body_tee(observability.log if observability is not None else None)
        if self.tee is not None:
            self.tee.took(data.encode() if isinstance(data, str) else data)
        context = RequestContext(record=record, key=self.key)
        status = 200
        try:
            await self._run(body, context)
            status = 499 if self.gone.is_set() else 500 if record.error else 200
        except HypnosError as error:
            status, record.error, record.error_type = error.status, error.message, error.type
            if not self.gone.is_set():
                await self._send(error_event(error))
        except WebSocketDisconnect:  # the client closed the socket while its response went out: no server fault
            self.gone.set()
            status, record.error = 499, record.error or "the client went away"
        except Exception as error:  # the response's own fault: the socket stays open, the client hears of it
            logger.error("a WebSocket response failed", exc_info=error)
            status = 500
            failure = HypnosError(500, "server_error", "The response failed; report it with its request id")
            if not self.gone.is_set():
                await self._send(error_event(failure))
        finally:
            if self.tee is not None:
                self.tee.store(record)
            self.tee = None
            await finish_detached(self.state, context, status)

    async def _send(self, text: str) -> None:
        """One event of the response under way to the client (and to the request log at trace)."""
        if self.tee is not None:
            self.tee.gave(text.rstrip("\n").encode() + b"\n")
        await self.socket.send_text(text)

    def _caller(self, context: RequestContext) -> Caller:
        """Whom one response serves: its own context, and a hang-up that is the socket closing."""

        async def receive() -> HTTPDisconnectEvent:
            await self.gone.wait()
            return {"type": "http.disconnect"}

        hint = self.socket.headers.get("x-hypnos-next-model") or None
        return Caller(state=self.state, context=context, receive=receive, next_model=hint)

    def _decode(self, data: str | bytes) -> ResponsesRequest:
        try:
            event = msgspec.json.decode(data)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            raise HypnosError(400, "invalid_request_error", "The message is not JSON", code="invalid_json") from None
        if not isinstance(event, dict) or event.get("type") != "response.create":
            kind = event.get("type") if isinstance(event, dict) else None
            raise HypnosError(
                400,
                "invalid_request_error",
                f"Unknown message type `{clip(kind)}`: send `response.create` messages",
                code="unknown_event_type",
                param="type",
            )
        if event.get("background"):
            raise HypnosError(
                400,
                "invalid_request_error",
                "`background` is for HTTP only: a WebSocket response runs while the socket is open",
                code="invalid_request",
                param="background",
            )
        fields = {name: value for name, value in event.items() if name not in ("type", *HTTP_ONLY)}
        try:
            return msgspec.convert(fields, ResponsesRequest)
        except msgspec.ValidationError as error:
            raise HypnosError(400, "invalid_request_error", str(error)) from None

    async def _run(self, body: ResponsesRequest, context: RequestContext) -> None:
        state, limits = self.state, self.state.settings.limits
        if not state.scheduler.ready:
            raise staging()
        meta = ResponseMeta(body)
        conversation = Conversation(state, self.owner, body)
        previous = body.previous_response_id
        if previous is not None and previous in self.kept:
            conversation.history = self.kept[previous]  # this connection's own, stored or not
        else:
            await conversation.load_history()
        items = [*conversation.history, *conversation.items]
        chat_request = responses_request(body, items, limits, meta.tools)
        if not body.generate:
            state.scheduler.serving(body.model, *chat_request.modalities)  # an unknown model is still a 404
            await self._prewarm(meta, conversation)
            return
        chat_run = ChatRun(self._caller(context), chat_request)
        await chat_run.open()
        run = chat_run.run
        live = LiveResponse(owner=self.owner, meta=meta, run=run, answer=chat_run.answer)
        live.events = ResponseEvents(bool((body.reasoning or {}).get("summary")), meta.tools, frame=line_frame)
        state.live_responses[meta.id] = live
        try:
            async for chunk in run.stream(lambda _lease: events_body(chat_run, live, conversation)):
                for line in chunk.splitlines():
                    await self._send(line.decode())
        finally:
            state.live_responses.pop(meta.id, None)
        self._keep(meta.id, [*conversation.history, *conversation.items, *conversation_items(live.events.output)])

    async def _prewarm(self, meta: ResponseMeta, conversation: Conversation) -> None:
        """`generate: false` (Codex's prewarm): the response created and completed at once with no output and no
        model work; a later response may continue it."""
        events = ResponseEvents(False, meta.tools, frame=line_frame)
        nothing = usage_of(ChatFinished(finish_reason="stop", prompt_tokens=0, completion_tokens=0))
        await self._send(events.event("response.created", response=meta.response("in_progress")).decode())
        done = meta.response("completed", [], nothing)
        await conversation.save(meta, done)
        await self._send(events.event("response.completed", response=done).decode())
        self._keep(meta.id, [*conversation.history, *conversation.items])

    def _keep(self, response_id: str, items: list[dict[str, Any]]) -> None:
        self.kept[response_id] = items
        while len(self.kept) > KEPT_PER_CONNECTION:
            self.kept.popitem(last=False)


def _authorization(socket: WebSocket[Any, Any, Any]) -> str | None:
    header = socket.headers.get("authorization")
    if header is None and (api_key := socket.headers.get("x-api-key")) is not None:
        header = f"Bearer {api_key}"
    return header


@websocket(PATH)
async def responses_socket(socket: WebSocket[Any, Any, Any]) -> None:
    """Responses over a WebSocket: authenticated like HTTP (the bearer header), then `response.create` messages."""
    state = hypnos_state(socket)
    origin = socket.headers.get("origin")
    same = origin is not None and origin.partition("://")[2].rstrip("/") == socket.headers.get("host", "")
    if origin and not same and not OriginPolicy(state.settings.server.allowed_origins).allows(origin):
        await socket.close(code=CLOSE_POLICY, reason="origin not allowed")  # before accept: the handshake fails
        return
    key: ApiKey | None = None
    permit = None
    if state.keys.enabled:
        try:
            key = state.keys.authenticate(_authorization(socket))
            permit = state.limiter.admit(key)
        except HypnosError as error:
            await socket.accept()
            await socket.send_text(error_event(error))
            await socket.close(code=CLOSE_POLICY, reason=error.message[:120])
            return
    try:
        await socket.accept()
        await ResponsesSocket(socket, state, key).serve()
    finally:
        if permit is not None:
            permit.release()


ROUTES = [responses_socket]
