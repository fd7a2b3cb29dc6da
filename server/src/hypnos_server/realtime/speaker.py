"""A realtime response's speech: its phrases spoken in order by the session's speech model, under one lease."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from hypnos.engine import AudioChunk, SpeechInput
from hypnos.errors import HypnosError
from hypnos.kit.audio import resample_pcm16
from hypnos.types import Modality

from hypnos_server.realtime.session import SAMPLE_RATE
from hypnos_server.realtime.stage import new_record, stage_run
from hypnos_server.routes.audio import pick_voice
from hypnos_server.routes.inference import engine_failed_message

if TYPE_CHECKING:
    from hypnos_server.realtime.conversation import Item
    from hypnos_server.realtime.surface import ResponseSurface

logger = logging.getLogger(__name__)


class Speaker:
    """Speaks the phrases of a response in order, in its own task, under one lease of the speech model."""

    def __init__(self, response: ResponseSurface) -> None:
        self.response = response
        self.queue: asyncio.Queue[tuple[Item, str] | None] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.error: HypnosError | None = None

    def say(self, item: Item, phrase: str) -> None:
        """Queue a phrase (the task starts with the first)."""
        self.queue.put_nowait((item, phrase))
        if self.task is None:
            self.task = asyncio.ensure_future(self._speak())

    async def finish(self) -> None:
        """Wait until every queued phrase was spoken (or the response cancelled); a failure fails the response."""
        if self.task is None:
            return
        self.queue.put_nowait(None)
        await asyncio.wait({self.task})
        if self.error is not None and self.response.error is None and not self.response.cancelled:
            self.response.error = self.error

    async def _speak(self) -> None:
        response = self.response
        config = response.config
        assert config.speech_model is not None
        record = new_record(response.record.key)  # the stage's own scratch record; the response's is the chat's
        began = time.perf_counter()
        run = None
        try:  # a speech model disabled, backing off or quarantined refuses already in stage_run
            run = stage_run(
                response.session.state, record, response.gone, config.speech_model, [Modality.TEXT_TO_SPEECH]
            )
            await run.open()
            response.gone_tokens(run)
            voice = pick_voice(config.voice, run.engine.capabilities())
            while (entry := await self.queue.get()) is not None and not response.cancelled:
                item, phrase = entry
                job = SpeechInput(text=phrase, voice=voice, speed=1.0, language=None)
                async with contextlib.aclosing(run.engine.speak(job, run.lease.cancel)) as chunks:
                    async for chunk in chunks:  # closed here on a break: the engine's stream ends with the lease
                        if response.cancelled:
                            break
                        await self._out(item, chunk, began)
                item.spoken.append((phrase, response.audio_ms))
        except HypnosError as error:
            self.error = None if error.type == "cancelled" else error
        except Exception as error:
            logger.error("realtime speech on %s failed", config.speech_model, exc_info=error)
            self.error = HypnosError(500, "server_error", engine_failed_message(config.speech_model))
        finally:
            if run is not None:
                await run.close()

    async def _out(self, item: Item, chunk: AudioChunk, began: float) -> None:
        response = self.response
        pcm = resample_pcm16(chunk.pcm16, chunk.sample_rate, SAMPLE_RATE)
        if response.first_audio_at is None:
            response.first_audio_at = time.perf_counter()
            response.stage_ms["speech_first_audio_ms"] = round((response.first_audio_at - began) * 1000, 1)
        response.audio_ms += len(pcm) / 2 / SAMPLE_RATE * 1000
        await response.audio_delta(item, pcm)
