"""What the client-event handlers, the audio-in functions and a response use of a realtime session
(connection.RealtimeSession), and what the speaker uses of its response (turn.Response)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hypnos.errors import HypnosError

    from hypnos_server.observability.realtime import RealtimeMetrics
    from hypnos_server.realtime import vad
    from hypnos_server.realtime.conversation import Item
    from hypnos_server.realtime.detectors import SpeechDetectors
    from hypnos_server.realtime.session import SessionConfig
    from hypnos_server.realtime.stage import EarlyTranscript
    from hypnos_server.routes.inference import InferenceRun
    from hypnos_server.state import HypnosState, RequestRecord


class Cancellable(Protocol):
    """The response in progress, as a handler cancels it (turn.Response)."""

    @property
    def cancelled(self) -> bool:
        """True once the response was cancelled (it may still be finishing)."""
        ...

    def cancel(self, reason: str) -> None:
        """Stop the response's stages at their next check."""
        ...


class SessionSurface(Protocol):
    """One connection's state and actions, as the handlers (handlers.py), the audio-in functions (input_audio.py) and
    a response (turn.py) see it."""

    app: Any
    state: HypnosState
    config: SessionConfig
    ga: bool
    conversation_id: str
    items: list[Item]
    buffer: bytearray
    segmenter: vad.TurnSegmenter | None
    detectors: SpeechDetectors
    turn: Item | None  # the user audio committed last that no response answered yet
    speech_item: str | None  # the item id of the turn the VAD hears now
    early: EarlyTranscript | None  # the turn so far, transcribing since a pause
    early_dropped: asyncio.Task[Any] | None  # the last early transcription dropped (it runs on)
    transcriptions: set[asyncio.Task[Any]]  # the committed audio being transcribed
    tasks: set[asyncio.Task[Any]]  # what the session's end waits for
    gone: asyncio.Event  # the session ends: every stage stops
    metrics: RealtimeMetrics | None

    @property
    def beta(self) -> bool:
        """The client asked for the beta protocol."""
        ...

    @property
    def key_label(self) -> str | None:
        """The caller's key label, None without keys."""
        ...

    @property
    def response(self) -> Cancellable | None:
        """The response in progress, if any."""
        ...

    @property
    def responding(self) -> bool:
        """True while a response runs that was not cancelled."""
        ...

    async def send(self, event: dict[str, Any]) -> None:
        """Queue one server event."""
        ...

    async def send_error(
        self,
        message: str,
        code: str | None,
        kind: str = "invalid_request_error",
        param: str | None = None,
        client_event: str | None = None,
    ) -> None:
        """Send an `error` event."""
        ...

    def add_item(self, item: Item, after: str | None = None) -> None:
        """Append an item (or insert it after `after`)."""
        ...

    def index_of(self, item_id: Any) -> int:
        """The position of the item with this id; item_not_found when there is none."""
        ...

    def previous_id(self, item: Item) -> str | None:
        """The id of the item before this one."""
        ...

    async def item_done(self, item: Item) -> None:
        """conversation.item.done once an item is final (GA dialect)."""
        ...

    async def rate_limits(self) -> None:
        """rate_limits.updated for the key."""
        ...

    def finish_record(self, record: RequestRecord) -> None:
        """Charge the key and hand the response's record to the request log and metrics."""
        ...

    def start_response(self, options: dict[str, Any]) -> None:
        """Start a response in its own task."""
        ...


class ResponseSurface(Protocol):
    """A response as its speaker (speaker.Speaker) sees it: settings, cancellation, audio out and its timings."""

    session: SessionSurface
    config: SessionConfig
    record: RequestRecord
    gone: asyncio.Event
    error: HypnosError | None
    audio_ms: float
    stage_ms: dict[str, float]
    first_audio_at: float | None

    @property
    def cancelled(self) -> bool:
        """True once the response was cancelled."""
        ...

    def gone_tokens(self, run: InferenceRun) -> None:
        """Cancel the run's lease token when the response is cancelled."""
        ...

    async def audio_delta(self, item: Item, pcm: bytes) -> None:
        """Send one response.audio.delta."""
        ...
