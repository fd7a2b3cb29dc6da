"""A realtime session's audio in: the input buffer, the server VAD turning appended audio into turns (commits and
responses), and the committed audio transcribed in the background."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from hypnos.engine import TranscriptionInput, TranscriptionResult
from hypnos.errors import HypnosError
from hypnos.types import Modality

from hypnos_server.realtime import vad
from hypnos_server.realtime.conversation import Item
from hypnos_server.realtime.events import RealtimeError, new_id
from hypnos_server.realtime.session import SAMPLE_RATE
from hypnos_server.realtime.stage import new_record, stage_run

if TYPE_CHECKING:
    from hypnos_server.observability.realtime import RealtimeMetrics
    from hypnos_server.realtime.detectors import SpeechDetectors
    from hypnos_server.realtime.session import SessionConfig
    from hypnos_server.realtime.turn import Response
    from hypnos_server.state import HypnosState

logger = logging.getLogger(__name__)

MIN_COMMIT_BYTES = SAMPLE_RATE * 2 // 10  # 100 ms: OpenAI refuses to commit less
# a turn longer than this is transcribed at its end only: an early transcription of a long turn, dropped at each
# pause the speaker goes on from, would cost the whole turn's transcription again and again
EARLY_MAX_BYTES = SAMPLE_RATE * 2 * 15


@dataclass
class EarlyTranscript:
    """The turn's audio so far, transcribing since a pause in the speech (vad.PAUSE_MS): the transcript when the turn
    ends there, dropped (its stage cancelled) when the speech goes on."""

    task: asyncio.Task[TranscriptionResult]
    gone: asyncio.Event
    began: float


class InputAudio:
    """The audio-in half of RealtimeSession (connection.py), which sets these attributes and the methods used here."""

    app: Any
    state: HypnosState
    key_label: str | None
    config: SessionConfig
    detectors: SpeechDetectors
    buffer: bytearray
    segmenter: vad.TurnSegmenter | None
    speech_item: str | None
    early: EarlyTranscript | None
    early_dropped: asyncio.Task[Any] | None
    turn: Item | None
    metrics: RealtimeMetrics | None
    response: Response | None
    transcriptions: set[asyncio.Task[Any]]
    tasks: set[asyncio.Task[Any]]
    gone: asyncio.Event
    ga: bool

    def new_segmenter(self) -> vad.TurnSegmenter | None:
        """A VAD for the session's turn_detection and speech detector (None when turn detection is off)."""
        detection = self.config.turn_detection
        if detection is None:
            return None
        kind = self.detectors.get(self.config.speech_detector)
        detector = kind.new(detection.threshold)
        return vad.TurnSegmenter(detector, SAMPLE_RATE, detection.silence_duration_ms, blocking=kind.blocking)

    async def _detect(self, segmenter: vad.TurnSegmenter, pcm: bytes) -> list[vad.VadEvent]:
        """The turn events of new audio; a model detector runs off the event loop, and one that fails leaves the
        session on the energy detector (the client hears of it once)."""
        if not segmenter.blocking:
            return segmenter.feed(pcm)
        try:
            return await asyncio.to_thread(segmenter.feed, pcm)
        except Exception:
            name = self.config.speech_detector
            logger.exception("realtime: the speech detector %s failed; the session goes on with energy", name)
            self.config = msgspec.structs.replace(self.config, speech_detector=vad.ENERGY.name)
            self.segmenter = self.new_segmenter()
            message = f"The speech detector `{name}` failed (the server log has the cause); `energy` hears turns now"
            await self.send_error(message, "speech_detector_failed", "server_error")
            return []

    async def append(self, pcm: bytes) -> None:
        """Add audio to the buffer; with server VAD, turn starts and ends become events, commits and responses."""
        limit = self.state.settings.limits.max_audio_bytes
        segmenter, detection = self.segmenter, self.config.turn_detection
        if len(self.buffer) + len(pcm) > limit:
            if segmenter is None or detection is None or not segmenter.speaking:
                raise RealtimeError(
                    "The input audio buffer is full (limits.max_audio_bytes); commit or clear it",
                    "input_audio_buffer_full",
                )
            await self._end_turn_at_limit(segmenter, detection)  # a turn as long as the buffer holds ends there
        self.buffer += pcm
        if segmenter is None or detection is None:
            return
        for turn in await self._detect(segmenter, pcm):
            if turn.kind == "started":
                self.speech_item = new_id("item")
                start = max(0, turn.at_ms - detection.prefix_padding_ms)
                await self.send(
                    {"type": "input_audio_buffer.speech_started", "audio_start_ms": start, "item_id": self.speech_item}
                )
                self._prefetch(self.config.transcription_model)  # loaded while the user speaks
                if self.responding and detection.interrupt_response:
                    self.response.cancel("turn_detected")  # barge-in
                    if self.metrics is not None:
                        self.metrics.barge_in()
            elif turn.kind == "paused":
                self._transcribe_early()
            elif turn.kind == "resumed":
                self.drop_early()
            else:
                item_id = self.speech_item or new_id("item")
                await self.send(
                    {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": turn.at_ms, "item_id": item_id}
                )
                await self.commit(item_id)
                await self._answer_turn(detection)
        if not segmenter.speaking:  # only the prefix padding is kept before speech: memory stays bounded
            keep = (detection.prefix_padding_ms + vad.ONSET_FRAMES * vad.FRAME_MS) * SAMPLE_RATE // 1000 * 2
            if len(self.buffer) > keep:
                del self.buffer[: len(self.buffer) - keep]

    async def _end_turn_at_limit(self, segmenter: vad.TurnSegmenter, detection: Any) -> None:
        """Server VAD with the buffer full mid-speech: the turn so far is committed (and answered) and the VAD starts
        on, so that speech or noise longer than the buffer never stalls the session."""
        item_id = self.speech_item or new_id("item")
        at_ms = segmenter.end_turn()
        await self.send({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": at_ms, "item_id": item_id})
        await self.commit(item_id)
        await self._answer_turn(detection)

    async def _answer_turn(self, detection: Any) -> None:
        """Server VAD ended a turn: a response answers it (when create_response and none runs) unless the key's limits
        refuse, which the client hears as an error event."""
        if detection.create_response and (self.response is None or self.response.cancelled):
            try:
                self.start_response({})
            except RealtimeError as error:
                await self.send_error(error.message, error.code, error.kind, error.param)

    def _transcribe_early(self) -> None:
        """Start transcribing the turn so far: when the VAD ends the turn here, its transcript is (nearly) ready. Not
        while an earlier one the speaker talked over still runs (a transcription cannot stop midway: a new one would
        queue behind it, the work doubled), nor past EARLY_MAX_BYTES of turn."""
        self.drop_early()
        dropped = self.early_dropped
        if (dropped is not None and not dropped.done()) or len(self.buffer) > EARLY_MAX_BYTES:
            return
        gone = asyncio.Event()
        task = asyncio.ensure_future(self._run_transcription(bytes(self.buffer), gone))
        self.tasks.add(task)  # the session's end waits for it (it is cancelled then)
        task.add_done_callback(self.tasks.discard)
        self.early = EarlyTranscript(task, gone, time.perf_counter())

    def drop_early(self) -> None:
        """Cancel the early transcription, if any (speech went on, the buffer was cleared, the session ends)."""
        early, self.early = self.early, None
        if early is not None:
            early.gone.set()
            early.task.add_done_callback(_quiet)
            self.early_dropped = early.task

    def _prefetch(self, model: str | None) -> None:
        prefetch = getattr(self.state.backend, "prefetch", None)
        if model is not None and prefetch is not None:
            prefetch(model)

    async def commit(self, item_id: str | None = None) -> None:
        """The buffer becomes a user audio item, transcribed in the background."""
        if len(self.buffer) < MIN_COMMIT_BYTES:
            raise RealtimeError(
                "The input audio buffer holds less than 100 ms of audio", "input_audio_buffer_commit_empty"
            )
        pcm, self.buffer = bytes(self.buffer), bytearray()
        item = Item(type="message", role="user", audio=True, id=item_id or new_id("item"))
        item.committed_at = time.perf_counter()
        self.turn = item
        self.add_item(item)
        previous = self.previous_id(item)
        await self.send({"type": "input_audio_buffer.committed", "previous_item_id": previous, "item_id": item.id})
        await self.send(
            {"type": "conversation.item.created", "previous_item_id": previous, "item": item.render(self.ga)}
        )
        early, self.early = self.early, None  # the turn ended at the pause: that transcript is this item's
        task = asyncio.ensure_future(self._transcribe(item, pcm, early))
        self.transcriptions.add(task)
        task.add_done_callback(self.transcriptions.discard)

    async def _run_transcription(self, pcm: bytes, gone: asyncio.Event) -> TranscriptionResult:
        """The transcription stage over pcm16 audio (cancelled when `gone` is set); HypnosError when it fails."""
        model = self.config.transcription_model
        if model is None:
            raise HypnosError(
                404, "invalid_request_error", "No speech_to_text model in the pool", code="model_not_found"
            )
        job = TranscriptionInput(audio=pcm, pcm_rate=SAMPLE_RATE)  # the turn's PCM as it is, and its rate
        # a model disabled, backing off or quarantined refuses already in stage_run
        run = stage_run(
            self.state, new_record(self.key_label), gone, model, [Modality.SPEECH_TO_TEXT], self.config.model
        )
        try:
            await run.open()
            return await run.call(lambda engine: engine.transcribe(job, run.lease.cancel))
        finally:
            await run.close()

    async def _transcribe(self, item: Item, pcm: bytes, early: EarlyTranscript | None) -> None:
        began = early.began if early is not None else time.perf_counter()
        try:
            result = await (early.task if early is not None else self._run_transcription(pcm, self.gone))
        except HypnosError as error:
            await self._transcription_failed(item, error.message, error.code or error.type)
            await self.item_done(item)
            return
        now = time.perf_counter()
        item.text = result.text.strip()
        item.transcription_ms = round((now - began) * 1000, 1)
        item.transcript_wait_ms = round((now - (item.committed_at or now)) * 1000, 1)
        if self.config.transcribe_input:
            await self.send(
                {
                    "type": "conversation.item.input_audio_transcription.completed",
                    "item_id": item.id,
                    "content_index": 0,
                    "transcript": item.text,
                }
            )
        await self.item_done(item)

    async def _transcription_failed(self, item: Item, message: str, code: str) -> None:
        error = {"type": "transcription_error", "code": code, "message": message, "param": None}
        await self.send(
            {
                "type": "conversation.item.input_audio_transcription.failed",
                "item_id": item.id,
                "content_index": 0,
                "error": error,
            }
        )

    async def transcriptions_done(self, cancelled: asyncio.Event) -> None:
        """Wait for the committed audio to be transcribed (a response answers it), or for `cancelled`."""
        if self.transcriptions:
            waiter = asyncio.ensure_future(cancelled.wait())
            try:
                while self.transcriptions and not cancelled.is_set():
                    await asyncio.wait({*self.transcriptions, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()


def _quiet(task: asyncio.Task[Any]) -> None:
    """Take a dropped task's outcome, so that its failure or cancellation is not reported as unretrieved."""
    if not task.cancelled():
        task.exception()
