"""One model stage of a realtime turn (transcription, chat, speech) through the routes' runner, and audio."""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypnos.engine import TranscriptionResult
from hypnos.types import Modality
from litestar.types import HTTPDisconnectEvent

from hypnos_server.realtime.events import RealtimeError
from hypnos_server.routes.inference import Caller, InferenceRun
from hypnos_server.state import HypnosState, RequestContext, RequestRecord, new_request_id

PATH = "/v1/realtime"


@dataclass
class EarlyTranscript:
    """The turn's audio so far, transcribing since a pause in the speech (vad.PAUSE_MS): the transcript when the turn
    ends there, dropped (its stage cancelled) when the speech goes on."""

    task: asyncio.Task[TranscriptionResult]
    gone: asyncio.Event
    began: float


def new_record(key: str | None) -> RequestRecord:
    """A request-log record for one realtime response (or a stage's scratch record)."""
    return RequestRecord(
        id=new_request_id(), method="GET", path=PATH, route=PATH, started_at=time.time(), key=key, stream=True
    )


def stage_caller(
    state: HypnosState, record: RequestRecord, gone: asyncio.Event, next_model: str | None = None
) -> Caller:
    """Whom a stage of a realtime turn serves: a context holding `record`, the next-model hint (the scheduler
    prefetches the turn's next model), and a hang-up that is `gone` (barge-in, response.cancel, the socket closed)."""

    async def receive() -> HTTPDisconnectEvent:
        await gone.wait()
        return {"type": "http.disconnect"}

    return Caller(state=state, context=RequestContext(record=record), receive=receive, next_model=next_model)


def stage_run(
    state: HypnosState,
    record: RequestRecord,
    gone: asyncio.Event,
    model: str,
    modalities: Sequence[Modality],
    next_model: str | None = None,
) -> InferenceRun:
    """An InferenceRun for one stage: the same lease, cancellation and record handling as the HTTP routes."""
    return InferenceRun(stage_caller(state, record, gone, next_model), model, modalities)


def decode_audio(data: Any) -> bytes:
    """The pcm16 bytes of an append's base64 `audio`; refuses what is not base64 of whole 16-bit samples."""
    if not isinstance(data, str):
        raise RealtimeError("`audio` must be a base64 string of pcm16 audio", "invalid_audio", "audio")
    try:
        pcm = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RealtimeError("`audio` is not valid base64", "invalid_audio", "audio") from None
    if len(pcm) % 2:
        raise RealtimeError("`audio` is not whole pcm16 samples (an odd byte count)", "invalid_audio", "audio")
    return pcm
