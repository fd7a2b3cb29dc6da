"""A realtime session's audio in, as functions of the session (connection.RealtimeSession, seen through
surface.SessionSurface): the input buffer, the server VAD turning appended audio into turns (commits and responses),
and the committed audio transcribed in the background."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import msgspec
from hypnos.engine import TranscriptionInput, TranscriptionResult
from hypnos.errors import HypnosError
from hypnos.types import Modality

from hypnos_server.realtime import vad
from hypnos_server.realtime.conversation import Item
from hypnos_server.realtime.events import RealtimeError, new_id
from hypnos_server.realtime.session import SAMPLE_RATE
from hypnos_server.realtime.stage import EarlyTranscript, new_record, stage_run

if TYPE_CHECKING:
    from hypnos_server.realtime.surface import SessionSurface

logger = logging.getLogger(__name__)

MIN_COMMIT_BYTES = SAMPLE_RATE * 2 // 10  # 100 ms: OpenAI refuses to commit less
# a turn longer than this is transcribed at its end only: an early transcription of a long turn, dropped at each
# pause the speaker goes on from, would cost the whole turn's transcription again and again
EARLY_MAX_BYTES = SAMPLE_RATE * 2 * 15


def new_segmenter(session: SessionSurface) -> vad.TurnSegmenter | None:
    """A VAD for the session's turn_detection and speech detector (None when turn detection is off)."""
    detection = session.config.turn_detection
    if detection is None:
        return None
    kind = session.detectors.get(session.config.speech_detector)
    detector = kind.new(detection.threshold)
    return vad.TurnSegmenter(detector, SAMPLE_RATE, detection.silence_duration_ms, blocking=kind.blocking)


async def _detect(session: SessionSurface, segmenter: vad.TurnSegmenter, pcm: bytes) -> list[vad.VadEvent]:
    """The turn events of new audio; a model detector runs off the event loop, and one that fails leaves the
    session on the energy detector (the client hears of it once)."""
    if not segmenter.blocking:
        return segmenter.feed(pcm)
    try:
        return await asyncio.to_thread(segmenter.feed, pcm)
    except Exception:
        name = session.config.speech_detector
        logger.exception("realtime: the speech detector %s failed; the session goes on with energy", name)
        session.config = msgspec.structs.replace(session.config, speech_detector=vad.ENERGY.name)
        session.segmenter = new_segmenter(session)
        message = f"The speech detector `{name}` failed (the server log has the cause); `energy` hears turns now"
        await session.send_error(message, "speech_detector_failed", "server_error")
        return []


async def append(session: SessionSurface, pcm: bytes) -> None:
    """Add audio to the buffer; with server VAD, turn starts and ends become events, commits and responses."""
    limit = session.state.settings.limits.max_audio_bytes
    segmenter, detection = session.segmenter, session.config.turn_detection
    if len(session.buffer) + len(pcm) > limit:
        if segmenter is None or detection is None or not segmenter.speaking:
            raise RealtimeError(
                "The input audio buffer is full (limits.max_audio_bytes); commit or clear it",
                "input_audio_buffer_full",
            )
        await _end_turn_at_limit(session, segmenter, detection)  # a turn as long as the buffer holds ends there
    session.buffer += pcm
    if segmenter is None or detection is None:
        return
    for turn in await _detect(session, segmenter, pcm):
        if turn.kind == "started":
            session.speech_item = new_id("item")
            start = max(0, turn.at_ms - detection.prefix_padding_ms)
            await session.send(
                {"type": "input_audio_buffer.speech_started", "audio_start_ms": start, "item_id": session.speech_item}
            )
            _prefetch(session, session.config.transcription_model)  # loaded while the user speaks
            response = session.response
            if response is not None and not response.cancelled and detection.interrupt_response:
                response.cancel("turn_detected")  # barge-in
                if session.metrics is not None:
                    session.metrics.barge_in()
        elif turn.kind == "paused":
            _transcribe_early(session)
        elif turn.kind == "resumed":
            drop_early(session)
        else:
            item_id = session.speech_item or new_id("item")
            await session.send(
                {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": turn.at_ms, "item_id": item_id}
            )
            await commit(session, item_id)
            await _answer_turn(session, detection)
    if not segmenter.speaking:  # only the prefix padding is kept before speech: memory stays bounded
        keep = (detection.prefix_padding_ms + vad.ONSET_FRAMES * vad.FRAME_MS) * SAMPLE_RATE // 1000 * 2
        if len(session.buffer) > keep:
            del session.buffer[: len(session.buffer) - keep]


async def _end_turn_at_limit(session: SessionSurface, segmenter: vad.TurnSegmenter, detection: Any) -> None:
    """Server VAD with the buffer full mid-speech: the turn so far is committed (and answered) and the VAD starts
    on, so that speech or noise longer than the buffer never stalls the session."""
    item_id = session.speech_item or new_id("item")
    at_ms = segmenter.end_turn()
    await session.send({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": at_ms, "item_id": item_id})
    await commit(session, item_id)
    await _answer_turn(session, detection)


async def _answer_turn(session: SessionSurface, detection: Any) -> None:
    """Server VAD ended a turn: a response answers it (when create_response and none runs) unless the key's limits
    refuse, which the client hears as an error event."""
    if detection.create_response and (session.response is None or session.response.cancelled):
        try:
            session.start_response({})
        except RealtimeError as error:
            await session.send_error(error.message, error.code, error.kind, error.param)


def _transcribe_early(session: SessionSurface) -> None:
    """Start transcribing the turn so far: when the VAD ends the turn here, its transcript is (nearly) ready. Not
    while an earlier one the speaker talked over still runs (a transcription cannot stop midway: a new one would
    queue behind it, the work doubled), nor past EARLY_MAX_BYTES of turn."""
    drop_early(session)
    dropped = session.early_dropped
    if (dropped is not None and not dropped.done()) or len(session.buffer) > EARLY_MAX_BYTES:
        return
    gone = asyncio.Event()
    task = asyncio.ensure_future(_run_transcription(session, bytes(session.buffer), gone))
    session.tasks.add(task)  # the session's end waits for it (it is cancelled then)
    task.add_done_callback(session.tasks.discard)
    session.early = EarlyTranscript(task, gone, time.perf_counter())


def drop_early(session: SessionSurface) -> None:
    """Cancel the early transcription, if any (speech went on, the buffer was cleared, the session ends)."""
    early, session.early = session.early, None
    if early is not None:
        early.gone.set()
        early.task.add_done_callback(_quiet)
        session.early_dropped = early.task


def _prefetch(session: SessionSurface, model: str | None) -> None:
    prefetch = getattr(session.state.backend, "prefetch", None)
    if model is not None and prefetch is not None:
        prefetch(model)


async def commit(session: SessionSurface, item_id: str | None = None) -> None:
    """The buffer becomes a user audio item, transcribed in the background."""
    if len(session.buffer) < MIN_COMMIT_BYTES:
        raise RealtimeError("The input audio buffer holds less than 100 ms of audio", "input_audio_buffer_commit_empty")
    pcm, session.buffer = bytes(session.buffer), bytearray()
    item = Item(type="message", role="user", audio=True, id=item_id or new_id("item"))
    item.committed_at = time.perf_counter()
    session.turn = item
    session.add_item(item)
    previous = session.previous_id(item)
    await session.send({"type": "input_audio_buffer.committed", "previous_item_id": previous, "item_id": item.id})
    await session.send(
        {"type": "conversation.item.created", "previous_item_id": previous, "item": item.render(session.ga)}
    )
    early, session.early = session.early, None  # the turn ended at the pause: that transcript is this item's
    task = asyncio.ensure_future(_transcribe(session, item, pcm, early))
    session.transcriptions.add(task)
    task.add_done_callback(session.transcriptions.discard)


async def _run_transcription(session: SessionSurface, pcm: bytes, gone: asyncio.Event) -> TranscriptionResult:
    """The transcription stage over pcm16 audio (cancelled when `gone` is set); HypnosError when it fails."""
    model = session.config.transcription_model
    if model is None:
        raise HypnosError(404, "invalid_request_error", "No speech_to_text model in the pool", code="model_not_found")
    job = TranscriptionInput(audio=pcm, pcm_rate=SAMPLE_RATE)  # the turn's PCM as it is, and its rate
    # a model disabled, backing off or quarantined refuses already in stage_run
    run = stage_run(
        session.state, new_record(session.key_label), gone, model, [Modality.SPEECH_TO_TEXT], session.config.model
    )
    try:
        await run.open()
        return await run.call(lambda engine: engine.transcribe(job, run.lease.cancel))
    finally:
        await run.close()


async def _transcribe(session: SessionSurface, item: Item, pcm: bytes, early: EarlyTranscript | None) -> None:
    began = early.began if early is not None else time.perf_counter()
    try:
        result = await (early.task if early is not None else _run_transcription(session, pcm, session.gone))
    except HypnosError as error:
        await _transcription_failed(session, item, error.message, error.code or error.type)
        await session.item_done(item)
        return
    now = time.perf_counter()
    item.text = result.text.strip()
    item.transcription_ms = round((now - began) * 1000, 1)
    item.transcript_wait_ms = round((now - (item.committed_at or now)) * 1000, 1)
    if session.config.transcribe_input:
        await session.send(
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": item.id,
                "content_index": 0,
                "transcript": item.text,
            }
        )
    await session.item_done(item)


async def _transcription_failed(session: SessionSurface, item: Item, message: str, code: str) -> None:
    error = {"type": "transcription_error", "code": code, "message": message, "param": None}
    await session.send(
        {
            "type": "conversation.item.input_audio_transcription.failed",
            "item_id": item.id,
            "content_index": 0,
            "error": error,
        }
    )


async def transcriptions_done(session: SessionSurface, cancelled: asyncio.Event) -> None:
    """Wait for the committed audio to be transcribed (a response answers it), or for `cancelled`."""
    if session.transcriptions:
        waiter = asyncio.ensure_future(cancelled.wait())
        try:
            while session.transcriptions and not cancelled.is_set():
                await asyncio.wait({*session.transcriptions, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()


def _quiet(task: asyncio.Task[Any]) -> None:
    """Take a dropped task's outcome, so that its failure or cancellation is not reported as unretrieved."""
    if not task.cancelled():
        task.exception()
