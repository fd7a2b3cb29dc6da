"""One model stage of a realtime turn (transcription, chat, speech) through the routes' InferenceRun, and audio."""

from __future__ import annotations

import array
import asyncio
import base64
import binascii
import sys
import time
from collections.abc import Sequence
from typing import Any, cast

from hypnos.types import Modality

from hypnos_server.realtime.events import RealtimeError
from hypnos_server.routes.inference import InferenceRun
from hypnos_server.state import CONTEXT_KEY, RequestContext, RequestRecord, new_request_id

PATH = "/v1/realtime"


def new_record(key: str | None) -> RequestRecord:
    """A request-log record for one realtime response (or a stage's scratch record)."""
    return RequestRecord(
        id=new_request_id(), method="GET", path=PATH, route=PATH, started_at=time.time(), key=key, stream=True
    )


class StageConnection:
    """What InferenceRun reads of a request, for a stage of a realtime turn: the app, a context holding `record`,
    the next-model hint (the scheduler prefetches the turn's next model), and a "client hung up" that is `gone`."""

    def __init__(self, app: Any, record: RequestRecord, gone: asyncio.Event, next_model: str | None) -> None:
        self.app = app
        self.scope: dict[str, Any] = {"state": {CONTEXT_KEY: RequestContext(record=record)}}
        self.headers = {"x-hypnos-next-model": next_model} if next_model else {}
        self._gone = gone

    async def receive(self) -> dict[str, Any]:
        """Wait until the stage is cancelled (barge-in, response.cancel, the socket closed): a disconnect."""
        await self._gone.wait()
        return {"type": "http.disconnect"}


def stage_run(
    app: Any,
    record: RequestRecord,
    gone: asyncio.Event,
    model: str,
    modalities: Sequence[Modality],
    next_model: str | None = None,
) -> InferenceRun:
    """An InferenceRun for one stage: the same lease, cancellation and record handling as the HTTP routes."""
    return InferenceRun(cast(Any, StageConnection(app, record, gone, next_model)), model, modalities)


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


def resample(pcm: bytes, source_rate: int, target_rate: int) -> bytes:
    """pcm16 mono from one rate to another (linear interpolation); unchanged when the rates match."""
    if source_rate == target_rate or not pcm:
        return pcm
    samples = array.array("h")
    samples.frombytes(pcm[: len(pcm) // 2 * 2])
    if sys.byteorder == "big":
        samples.byteswap()
    count = max(1, len(samples) * target_rate // source_rate)
    step = (len(samples) - 1) / max(count - 1, 1)
    out = array.array("h", bytes(2 * count))
    last = len(samples) - 1
    for index in range(count):
        position = index * step
        low = int(position)
        high = min(low + 1, last)
        fraction = position - low
        out[index] = int(samples[low] + (samples[high] - samples[low]) * fraction)
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()
