"""One realtime WebSocket session: the client events read and dispatched, the server events written in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import msgspec
from hypnos.errors import HypnosError
from hypnos.types import Modality

from hypnos_server.observability import observability_of
from hypnos_server.realtime.conversation import MAX_ITEMS, Item, item_chars
from hypnos_server.realtime.detectors import SpeechDetectors
from hypnos_server.realtime.events import RealtimeError, error_event, event_name, new_id
from hypnos_server.realtime.handlers import HANDLERS
from hypnos_server.realtime.input_audio import drop_early, new_segmenter
from hypnos_server.realtime.session import SessionConfig, first_model, render
from hypnos_server.realtime.stage import EarlyTranscript, new_record
from hypnos_server.realtime.turn import Response

if TYPE_CHECKING:
    from litestar import WebSocket

    from hypnos_server.asgi.keys import ApiKey
    from hypnos_server.state import HypnosState, RequestRecord

logger = logging.getLogger(__name__)

CLOSE_TOO_BIG, CLOSE_POLICY = 1009, 1008
SETTLE_SECS = 20.0  # how long closing waits for the stages to stop
FLUSH_SECS = 2.0  # how long closing waits for the client to take the last events


class RealtimeSession:
    """The state of one connection: settings, conversation, input buffer (its audio-in functions: input_audio.py),
    the response in progress."""

    def __init__(
        self, socket: WebSocket[Any, Any, Any], state: HypnosState, key: ApiKey | None, model: str, beta: bool
    ) -> None:
        self.socket = socket
        self.app = socket.app
        self.state = state
        self.key = key
        self.key_label = key.label if key is not None else None
        self.beta = beta  # the client asked for the beta protocol: never switched to the GA names
        self.ga = False  # GA event names once the client sends a GA-shaped session.update
        self.conversation_id = new_id("conv")  # the session's one conversation
        scheduler = state.scheduler
        self.detectors = state.speech_detectors or SpeechDetectors()
        self.config = SessionConfig(
            id=new_id("sess"),
            model=model,
            transcription_model=first_model(scheduler, Modality.SPEECH_TO_TEXT),
            speech_model=first_model(scheduler, Modality.TEXT_TO_SPEECH),
            speech_detector=self.detectors.default,
        )
        self.max_frame = state.settings.limits.max_realtime_frame_bytes
        self.max_chars = state.settings.limits.max_prompt_chars  # what the conversation's items may hold together
        self.idle_secs = state.settings.limits.realtime_idle_timeout_secs
        self.last_event = time.monotonic()
        self.max_pending = state.settings.limits.max_realtime_pending_bytes  # events the client has not taken
        self.items: list[Item] = []
        self.buffer = bytearray()
        self.segmenter = new_segmenter(self)
        self.speech_item: str | None = None
        self.early: EarlyTranscript | None = None
        self.early_dropped: asyncio.Task[Any] | None = None  # the last early transcription dropped (it runs on)
        self.turn: Item | None = None
        observability = observability_of(state)
        self.metrics = observability.metrics.realtime if observability is not None else None
        self.response: Response | None = None
        self.response_task: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.transcriptions: set[asyncio.Task[Any]] = set()
        self.gone = asyncio.Event()  # the session ends: every stage stops
        self.outgoing: asyncio.Queue[str] = asyncio.Queue()
        self.pending_bytes = 0
        self.close_code = 1000
        self.close_reason = ""
        self.client_left = False

    # ---- writing ---------------------------------------------------------------------------------------------

    async def send(self, event: dict[str, Any]) -> None:
        """Queue one server event (named in the session's dialect); a client that stopped reading is dropped."""
        if self.gone.is_set() and self.client_left:
            return
        event.setdefault("event_id", new_id("event"))
        event["type"] = event_name(event["type"], self.ga)
        text = msgspec.json.encode(event).decode()
        self.pending_bytes += len(text)
        if self.pending_bytes > self.max_pending:
            self.end(CLOSE_POLICY, "the client does not read its events")
            return
        self.outgoing.put_nowait(text)

    async def send_error(
        self,
        message: str,
        code: str | None,
        kind: str = "invalid_request_error",
        param: str | None = None,
        client_event: str | None = None,
    ) -> None:
        """Send an `error` event."""
        await self.send(error_event(message, code, kind, param, client_event))

    async def _write(self) -> None:
        while True:
            text = await self.outgoing.get()
            await self.socket.send_text(text)
            self.pending_bytes -= len(text)
            self.outgoing.task_done()

    def end(self, code: int, reason: str) -> None:
        """End the session with this close code."""
        if not self.gone.is_set():
            self.close_code, self.close_reason = code, reason
            self.gone.set()

    # ---- the session's life -------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Run until the client leaves or the session is ended; then stop every stage, flush, and close."""
        writer = asyncio.ensure_future(self._write())
        reader = asyncio.ensure_future(self._read())
        ended = asyncio.ensure_future(self.gone.wait())
        idle = asyncio.ensure_future(self._watch_idle())
        if self.metrics is not None:
            self.metrics.session_opened()
        try:
            await self.send({"type": "session.created", "session": render(self.config)})
            if self.beta:  # the beta protocol announces the conversation; GA has no such event
                conversation = {"id": self.conversation_id, "object": "realtime.conversation"}
                await self.send({"type": "conversation.created", "conversation": conversation})
            await asyncio.wait({reader, ended, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if self.response is not None:
                self.response.cancel("session_closed")
            drop_early(self)
            self.gone.set()  # the client is gone or the session ended: its stages stop at their next check
            stopping = self.tasks | self.transcriptions
            if stopping:
                await asyncio.wait(stopping, timeout=SETTLE_SECS)
            if not self.client_left and not writer.done():  # what was said before the end still goes out
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._drained(), FLUSH_SECS)
            for task in (reader, writer, ended, idle):
                task.cancel()
            await asyncio.gather(reader, writer, ended, idle, return_exceptions=True)
            if self.metrics is not None:
                self.metrics.session_closed()
        if not self.client_left:
            with contextlib.suppress(Exception):  # the client may be gone already (or never reads: bounded)
                await asyncio.wait_for(
                    self.socket.close(code=self.close_code, reason=self.close_reason or None), FLUSH_SECS
                )

    async def _drained(self) -> None:
        await self.outgoing.join()

    async def _watch_idle(self) -> None:
        """End the session once the client sent nothing for realtime_idle_timeout_secs while nothing ran for it."""
        if not self.idle_secs:
            return
        while True:
            await asyncio.sleep(max(0.05, self.idle_secs - (time.monotonic() - self.last_event)))
            if self.response is not None or self.transcriptions:
                self.last_event = time.monotonic()  # work in progress is no idleness
            elif time.monotonic() - self.last_event >= self.idle_secs:
                message = f"The session was idle for {self.idle_secs:g} s (limits.realtime_idle_timeout_secs)"
                await self.send_error(message, "session_expired")
                await asyncio.sleep(0)  # let the writer send it before the close
                self.end(1000, "idle timeout")
                return

    async def _read(self) -> None:
        while True:
            message = await self.socket.receive()
            self.last_event = time.monotonic()
            if message["type"] == "websocket.disconnect":
                self.client_left = True
                self.gone.set()
                return
            if message["type"] != "websocket.receive":
                continue
            data: str | bytes = message.get("text") or message.get("bytes") or b""
            if len(data) > self.max_frame:
                await self.send_error(
                    f"The frame is {len(data)} bytes, above limits.max_realtime_frame_bytes ({self.max_frame})",
                    "frame_too_large",
                )
                await asyncio.sleep(0)  # let the writer send it before the close
                self.end(CLOSE_TOO_BIG, "frame too large")
                return
            await self.handle(data)

    async def handle(self, data: str | bytes) -> None:
        """Decode and dispatch one client event; anything wrong with it is an `error` event, never the end."""
        try:
            event = msgspec.json.decode(data)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            await self.send_error("The frame is not a JSON object", "invalid_json")
            return
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            await self.send_error("A client event is a JSON object with a string `type`", "invalid_event", param="type")
            return
        client_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        handler = HANDLERS.get(event["type"])
        if handler is None:
            await self.send_error(
                f"Unknown event type `{event['type'][:64]}`", "unknown_event_type", param="type", client_event=client_id
            )
            return
        try:
            await handler(self, event)
        except RealtimeError as error:
            await self.send_error(error.message, error.code, error.kind, error.param, client_id)
        except HypnosError as error:
            await self.send_error(error.message, error.code or error.type, error.type, client_event=client_id)
        except Exception:  # a handler's own fault: the session goes on, the client hears of it
            logger.exception("realtime: the `%s` event failed", event["type"][:64])
            message = "The event could not be handled; the server log has the cause"
            await self.send_error(message, "server_error", "server_error", client_event=client_id)

    # ---- conversation ----------------------------------------------------------------------------------------

    def add_item(self, item: Item, after: str | None = None) -> None:
        """Append an item (or insert it after `after`), dropping the oldest past MAX_ITEMS or once the items hold
        more than max_prompt_chars together; an item alone above it is refused."""
        size = item_chars(item)
        if size > self.max_chars:
            message = f"The item holds {size} characters, above limits.max_prompt_chars ({self.max_chars})"
            raise RealtimeError(message, "item_too_large", "item")
        index = len(self.items)
        if after is not None:
            index = 0 if after == "root" else self.index_of(after) + 1
        self.items.insert(index, item)
        total = sum(item_chars(kept) for kept in self.items)
        while len(self.items) > 1 and (len(self.items) > MAX_ITEMS or total > self.max_chars):
            total -= item_chars(self.items.pop(0) if self.items[0] is not item else self.items.pop(1))

    def index_of(self, item_id: Any) -> int:
        """The position of the item with this id; item_not_found when there is none."""
        for index, item in enumerate(self.items):
            if item.id == item_id:
                return index
        raise RealtimeError(f"No item with id `{str(item_id)[:64]}`", "item_not_found", "item_id")

    def previous_id(self, item: Item) -> str | None:
        """The id of the item before this one."""
        index = self.items.index(item) if item in self.items else 0
        return self.items[index - 1].id if index > 0 else None

    async def item_done(self, item: Item) -> None:
        """conversation.item.done once an item is final (GA: a session that negotiated the beta protocol never gets
        it)."""
        if not self.beta:
            previous = self.previous_id(item)
            await self.send(
                {"type": "conversation.item.done", "previous_item_id": previous, "item": item.render(self.ga)}
            )

    async def rate_limits(self) -> None:
        """rate_limits.updated: what the key has left of its requests_per_minute and tokens_per_day (an empty list
        without keys or limits)."""
        budgets = self.state.limiter.remaining(self.key) if self.key is not None else []
        limits = [
            {"name": name, "limit": limit, "remaining": left, "reset_seconds": reset}
            for name, limit, left, reset in budgets
        ]
        await self.send({"type": "rate_limits.updated", "rate_limits": limits})

    def finish_record(self, record: RequestRecord) -> None:
        """Charge the key and hand the response's record to the request log and metrics."""
        if self.key is not None:
            self.state.limiter.charge(self.key, record.tokens)
        self.state.notify(record)

    # ---- responses -------------------------------------------------------------------------------------------

    @property
    def responding(self) -> bool:
        """True while a response runs that was not cancelled (a cancelled one is only finishing)."""
        return self.response is not None and not self.response.cancelled

    def admit_response(self) -> None:
        """Count a response against the key's limits (requests_per_minute, tokens_per_day); past them a
        rate_limit_exceeded RealtimeError, and a refused request's record (the socket stays open)."""
        if self.key is None:
            return
        try:
            self.state.limiter.admit(self.key, concurrent=False)  # the socket holds the key's concurrency slot
        except HypnosError as error:
            record = new_record(self.key_label)
            record.model, record.status, record.error, record.error_type = (
                self.config.model,
                429,
                error.message,
                error.type,
            )
            self.state.notify(record)
            message = f"{error.message} ({error.code}); retry in {error.retry_after} s"
            raise RealtimeError(message, "rate_limit_exceeded", kind=error.type) from None

    def start_response(self, options: dict[str, Any]) -> None:
        """Start a response in its own task, after the cancelled one still finishing (responses never overlap); a
        RealtimeError when the key's limits refuse it."""
        self.admit_response()
        response = Response(self, options)
        before = self.response_task
        self.response = response
        task = self.response_task = asyncio.ensure_future(self._respond(response, before))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _respond(self, response: Response, before: asyncio.Task[None] | None) -> None:
        try:
            if before is not None and not before.done():
                await asyncio.wait({before})
            await response.run()
        finally:
            if self.response is response:
                self.response = None
