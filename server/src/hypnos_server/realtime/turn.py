"""One realtime response: the conversation through the chat model, its text cut into phrases that the speech model
speaks while the chat goes on; cancelled at once by barge-in or response.cancel."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import TYPE_CHECKING, Any

from hypnos.chat import ChatInput
from hypnos.engine import CancelToken, ChatFinished, ContentDelta, ToolCallEvent
from hypnos.errors import HypnosError
from hypnos.openai import ToolCall

from hypnos_server.observability.realtime import FIRST_AUDIO
from hypnos_server.realtime.conversation import Item, add_items, chat_tools, output_limit
from hypnos_server.realtime.events import new_id
from hypnos_server.realtime.input_audio import transcriptions_done
from hypnos_server.realtime.phrases import PhraseSplitter
from hypnos_server.realtime.session import SAMPLE_RATE
from hypnos_server.realtime.speaker import Speaker
from hypnos_server.realtime.stage import new_record, stage_caller
from hypnos_server.routes.chat_request import (
    ChatRequest,
    Conversation,
    checked_tools,
    max_tokens_of,
    sampling_of,
    tool_choice_of,
)
from hypnos_server.routes.chat_run import ChatRun
from hypnos_server.routes.inference import InferenceRun, engine_failed_message

if TYPE_CHECKING:
    from hypnos_server.realtime.surface import SessionSurface

logger = logging.getLogger(__name__)


class Response:
    """A response.create's answer, from response.created to response.done."""

    def __init__(self, session: SessionSurface, options: dict[str, Any]) -> None:
        self.session = session
        self.config = session.config
        self.id = new_id("resp")
        self.instructions = options.get("instructions") if isinstance(options.get("instructions"), str) else None
        self.metadata = options.get("metadata") if isinstance(options.get("metadata"), dict) else None
        self.max_output_tokens = output_limit(options, self.config.max_output_tokens)
        modalities = options.get("output_modalities", options.get("modalities"))
        audio = self.config.audio_out if not isinstance(modalities, list) else "audio" in modalities
        self.audio = audio and self.config.speech_model is not None  # no speech model in the pool: text only
        self.gone = asyncio.Event()  # set by cancel(): the stages stop, no more deltas go out
        self.reason = "client_cancelled"
        self.output: list[Item] = []
        self.record = new_record(session.key_label)
        self.record.model = self.config.model
        self.finished: ChatFinished | None = None
        self.error: HypnosError | None = None
        self.audio_ms = 0.0
        self.stage_ms: dict[str, float] = {}
        self.turn, session.turn = session.turn, None  # the user audio this response answers, if any
        self.first_audio_at: float | None = None
        self.tokens: list[CancelToken] = []

    @property
    def cancelled(self) -> bool:
        """True once cancel() was called."""
        return self.gone.is_set()

    def cancel(self, reason: str) -> None:
        """Stop the chat and the speech at their next check (their leases go back as they stop)."""
        if not self.gone.is_set():
            self.reason = reason
            self.gone.set()
            for token in self.tokens:
                token.cancel()

    def render(self, status: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response object of response.created / response.done: the beta fields (`modalities`, `voice`,
        `output_audio_format`) and the GA ones (`output_modalities`, `audio.output`) side by side."""
        limit = self.max_output_tokens if self.max_output_tokens is not None else "inf"
        return {
            "id": self.id,
            "object": "realtime.response",
            "status": status,
            "status_details": details,
            "output": [item.render(self.session.ga) for item in self.output],
            "conversation_id": self.session.conversation_id,
            "output_modalities": ["audio"] if self.audio else ["text"],
            "modalities": ["text", "audio"] if self.audio else ["text"],
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": SAMPLE_RATE}, "voice": self.config.voice}},
            "voice": self.config.voice,
            "output_audio_format": "pcm16",
            "max_output_tokens": limit,
            "metadata": self.metadata,
            "usage": self._usage() if status != "in_progress" else None,
        }

    def _usage(self) -> dict[str, Any]:
        done = self.finished
        tokens_in, tokens_out = (done.prompt_tokens, done.completion_tokens) if done else (0, self.record.tokens_out)
        cached = done.cached_tokens if done else 0
        return {
            "total_tokens": tokens_in + tokens_out,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "input_token_details": {"text_tokens": tokens_in, "audio_tokens": 0, "cached_tokens": cached},
            "output_token_details": {"text_tokens": tokens_out, "audio_tokens": 0},
        }

    async def send(self, event: dict[str, Any]) -> None:
        """Send a delta unless the response was cancelled meanwhile."""
        if not self.cancelled:
            await self.session.send(event)

    # ---- the run ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """The whole response; never raises (a failure ends it `failed`, with an error event)."""
        started = time.perf_counter()
        await self.session.send({"type": "response.created", "response": self.render("in_progress")})
        await self.session.rate_limits()
        try:
            await transcriptions_done(self.session, self.gone)
            if not self.cancelled:
                await self._chat()
        except HypnosError as error:
            if error.type != "cancelled" and not self.cancelled:
                self.error = error
        except Exception as error:  # an engine's or our own bug: the session goes on
            logger.error("realtime response %s failed", self.id, exc_info=error)
            self.error = HypnosError(500, "server_error", engine_failed_message(self.config.model))
        await self._finish(started)

    async def _finish(self, started: float) -> None:
        for item in self.output:
            if item.status == "in_progress":
                item.status = "incomplete"
        details: dict[str, Any] | None
        if self.cancelled:
            status, details = "cancelled", {"type": "cancelled", "reason": self.reason}
        elif self.error is not None:
            error = self.error
            status, details = "failed", {"type": "failed", "error": {"type": error.type, "code": error.code}}
            await self.session.send_error(error.message, error.code or error.type, error.type)
        else:
            status, details = "completed", None
        await self.session.send({"type": "response.done", "response": self.render(status, details)})
        record = self.record
        record.status = 499 if self.cancelled else (self.error.status if self.error is not None else 200)
        if self.error is not None:
            record.error, record.error_type = self.error.message, self.error.type
        elif self.cancelled:
            record.error, record.error_type = f"cancelled ({self.reason})", "cancelled"
        record.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        record.stages_ms = self._stages()
        logger.debug("realtime response %s (%s): %s, stages %s", self.id, record.id, status, record.stages_ms)
        self.session.finish_record(record)

    def _stages(self) -> dict[str, float] | None:
        """The stage timings for the record: the turn's transcription, the chat's, the speech's, and the time from the
        end of the user's speech (VAD stop or commit) to the first audio out."""
        stages = dict(self.stage_ms)
        turn = self.turn
        if turn is not None and turn.transcription_ms is not None:
            stages["transcription_ms"] = turn.transcription_ms
            stages["transcription_wait_ms"] = turn.transcript_wait_ms or 0.0
        if turn is not None and turn.committed_at is not None and self.first_audio_at is not None:
            stages[FIRST_AUDIO] = round((self.first_audio_at - turn.committed_at) * 1000, 1)
        return stages or None

    def _chat_request(self) -> ChatRequest:
        """The turn's ChatRequest: the session's conversation, tools and options (the same checks as HTTP chat)."""
        config = self.config
        limits = self.session.state.settings.limits
        conversation = Conversation(limits)
        add_items(conversation, config, self.session.items, self.instructions)
        messages = conversation.checked()
        tools, choice, forced = chat_tools(config)
        tools = checked_tools(tools)
        tool_choice, forced = tool_choice_of(choice, tools, forced)
        chat = ChatInput(
            messages=messages,
            max_tokens=max_tokens_of(self.max_output_tokens, limits),
            sampling=sampling_of(temperature=config.temperature),
            tools=tools,
            tool_choice=tool_choice,
            forced_tool=forced,
        )
        return conversation.request(config.model, chat, stream=True)

    async def _chat(self) -> None:
        config = self.config
        speaker = Speaker(self) if self.audio else None
        chat_run = ChatRun(
            stage_caller(self.session.state, self.record, self.gone, config.speech_model), self._chat_request()
        )
        run, answer = chat_run.run, chat_run.answer
        message: Item | None = None
        splitter = PhraseSplitter()
        first_token: float | None = None
        began = time.perf_counter()
        try:
            await chat_run.open()
            events = chat_run.events()
            self.gone_tokens(run)
            try:
                async for event in events:
                    if self.cancelled:
                        continue  # the engine stops at its next check and finishes
                    if isinstance(event, ContentDelta) and event.text:
                        first_token = first_token or time.perf_counter()
                        if message is None:
                            message = await self._open_message()
                        message.text += event.text
                        await self._text_delta(message, event.text)
                        if speaker is not None:
                            for phrase in splitter.feed(event.text):
                                self._say(speaker, message, phrase, began)
                    elif isinstance(event, ToolCallEvent):
                        await self._function_call(event.call)
                    elif isinstance(event, ChatFinished):
                        self.finished = answer.final()
                        rest = splitter.flush()  # the last phrase goes now, not after the lease is given back
                        if rest and speaker is not None and message is not None:
                            self._say(speaker, message, rest, began)
            finally:
                await events.aclose()
        finally:
            await chat_run.close()
            self.stage_ms["chat_ms"] = round((time.perf_counter() - began) * 1000, 1)
            if first_token is not None:
                self.stage_ms["chat_first_token_ms"] = round((first_token - began) * 1000, 1)
            if speaker is not None:
                rest = splitter.flush()
                if rest and message is not None:
                    self._say(speaker, message, rest, began)
                await speaker.finish()
        if message is not None:
            await self._close_message(message)

    def _say(self, speaker: Speaker, message: Item, phrase: str, chat_began: float) -> None:
        """Hand a phrase to the speaker; the first one's time from the chat's start is a stage of the turn."""
        speaker.say(message, phrase)
        if "chat_first_phrase_ms" not in self.stage_ms:
            self.stage_ms["chat_first_phrase_ms"] = round((time.perf_counter() - chat_began) * 1000, 1)

    def gone_tokens(self, run: InferenceRun) -> None:
        """Cancel the run's lease token when the response is cancelled."""
        token = run.lease.cancel
        self.tokens.append(token)
        if self.cancelled:
            token.cancel()

    async def _open_message(self) -> Item:
        item = Item(type="message", role="assistant", audio=self.audio, status="in_progress")
        await self._add_output(item)
        part = item.part(self.session.ga)
        await self.send({"type": "response.content_part.added", **self._where(item), "part": part})
        return item

    async def _add_output(self, item: Item) -> None:
        self.output.append(item)
        self.session.add_item(item)
        rendered = item.render(self.session.ga)
        await self.send(
            {
                "type": "response.output_item.added",
                "response_id": self.id,
                "output_index": len(self.output) - 1,
                "item": rendered,
            }
        )
        await self.send(
            {"type": "conversation.item.created", "previous_item_id": self.session.previous_id(item), "item": rendered}
        )

    def _where(self, item: Item) -> dict[str, Any]:
        return {"response_id": self.id, "item_id": item.id, "output_index": self.output.index(item), "content_index": 0}

    async def _text_delta(self, item: Item, text: str) -> None:
        kind = "response.audio_transcript.delta" if item.audio else "response.text.delta"
        await self.send({"type": kind, **self._where(item), "delta": text})

    async def audio_delta(self, item: Item, pcm: bytes) -> None:
        """One response.audio.delta of base64 pcm16."""
        await self.send({"type": "response.audio.delta", **self._where(item), "delta": base64.b64encode(pcm).decode()})

    async def _close_message(self, item: Item) -> None:
        if self.cancelled and item.audio:  # barge-in: the conversation keeps what was spoken
            item.truncate(self.audio_ms)
        item.status = "incomplete" if self.cancelled else "completed"
        where = self._where(item)
        if not self.cancelled:
            if item.audio:
                await self.send({"type": "response.audio.done", **where})
                await self.send({"type": "response.audio_transcript.done", **where, "transcript": item.text})
            else:
                await self.send({"type": "response.text.done", **where, "text": item.text})
        await self.send({"type": "response.content_part.done", **where, "part": item.part(self.session.ga)})
        await self.send(
            {
                "type": "response.output_item.done",
                "response_id": self.id,
                "output_index": where["output_index"],
                "item": item.render(self.session.ga),
            }
        )
        if not self.cancelled:
            await self.session.item_done(item)

    async def _function_call(self, call: ToolCall) -> None:
        item = Item(
            type="function_call",
            call_id=call.id,
            name=call.function.name,
            arguments=call.function.arguments,
            status="in_progress",
        )
        await self._add_output(item)
        where = {
            "response_id": self.id,
            "item_id": item.id,
            "output_index": self.output.index(item),
            "call_id": call.id,
        }
        await self.send({"type": "response.function_call_arguments.delta", **where, "delta": item.arguments})
        item.status = "completed"
        await self.send(
            {"type": "response.function_call_arguments.done", **where, "name": item.name, "arguments": item.arguments}
        )
        await self.send(
            {
                "type": "response.output_item.done",
                "response_id": self.id,
                "output_index": where["output_index"],
                "item": item.render(self.session.ga),
            }
        )
        if not self.cancelled:
            await self.session.item_done(item)
