"""POST /v1/messages (Anthropic Messages) and /v1/messages/count_tokens on the chat runner: one ChatRequest, Anthropic's
message and event stream shapes (errors in Anthropic's shape on these paths, see errors.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
from hypnos.engine import ChatAccepted, ChatFinished, ContentDelta, ReasoningDelta, ToolCallEvent
from hypnos.errors import HypnosError, clip
from hypnos.openai import ToolCall
from litestar import Request, Response, post

from hypnos_server.routes.chat_run import ChatRun
from hypnos_server.routes.chat_stream import Choice
from hypnos_server.routes.inference import decode_json, engine_failed_message, json_response, ready_guard
from hypnos_server.routes.messages_input import MessagesRequest, messages_request
from hypnos_server.routes.messages_threads import continued, save_turn
from hypnos_server.routes.messages_tools import read_tools
from hypnos_server.routes.responses import owner_of
from hypnos_server.state import hypnos_state, request_context

logger = logging.getLogger(__name__)
# A stream waiting on its engine longer than this (a long prefill on a CPU) sends a `ping` event, as Anthropic's API
# does: Claude Code's client drops a stream silent for about 300 s and sends the request again
PING_SECS = 15.0

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def usage_of(finished: ChatFinished) -> dict[str, Any]:
    """Anthropic usage: uncached input tokens, tokens read from the prefix cache, output tokens."""
    return _usage(finished.prompt_tokens, finished.cached_tokens, finished.completion_tokens)


def start_usage(first: Any) -> dict[str, Any]:
    """message_start's usage: the input tokens as the final usage counts them when the engine's first event is a
    ChatAccepted (the prompt read, before its prefill), else 0."""
    if not isinstance(first, ChatAccepted):
        return {"input_tokens": 0, "output_tokens": 0}
    return _usage(first.prompt_tokens, first.cached_tokens, 0)


def _usage(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt_tokens - cached_tokens,
        "cache_read_input_tokens": cached_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def _input(call: ToolCall) -> Any:
    try:
        return json.loads(call.function.arguments or "{}")
    except ValueError:
        return {}


def content_blocks(choice: Choice) -> list[dict[str, Any]]:
    """A whole answer's blocks: thinking, text, tool_use."""
    blocks: list[dict[str, Any]] = []
    if choice.thoughts:
        blocks.append({"type": "thinking", "thinking": "".join(choice.thoughts), "signature": ""})
    if choice.text:
        blocks.append({"type": "text", "text": "".join(choice.text)})
    blocks.extend({"type": "tool_use", "id": c.id, "name": c.function.name, "input": _input(c)} for c in choice.calls)
    return blocks


def stop_of(finished: ChatFinished) -> tuple[str, str | None]:
    """`stop_reason` and `stop_sequence`: "stop_sequence" with the string when a stop sequence ended the answer."""
    if finished.finish_reason == "stop" and finished.stop_sequence is not None:
        return "stop_sequence", finished.stop_sequence
    return STOP_REASONS.get(finished.finish_reason, "end_turn"), None


def _note_ignored(request: Request[Any, Any, Any], body: MessagesRequest) -> None:
    """What Claude Code and the SDKs send that means nothing here, logged at debug (see the README's Messages rows)."""
    if not logger.isEnabledFor(logging.DEBUG):
        return
    ignored = [name for name in ("context_management",) if getattr(body, name) is not None]
    ignored += [f"output_config.{key}" for key in body.output_config or {} if key != "format"]
    ignored += [f"tools[{i}].defer_loading" for i, tool in enumerate(body.tools or []) if "defer_loading" in tool]
    betas = request.headers.get("anthropic-beta")
    if ignored or betas:
        logger.debug("messages request: ignored %s; anthropic-beta: %s", ", ".join(ignored) or "nothing", betas)


async def _prepared(request: Request[Any, Any, Any], counting: bool) -> tuple[MessagesRequest, ChatRun, dict[str, str]]:
    """The body (a thread's history added), its run, and the headers naming the typed tools dropped."""
    state = hypnos_state(request)
    body = await decode_json(request, MessagesRequest)
    context = request_context(request)
    context.record.model, context.record.stream = body.model, body.stream and not counting
    _note_ignored(request, body)
    body = await continued(state.threads, owner_of(context), body)
    tools = read_tools(body.tools)
    return body, ChatRun(request, messages_request(body, state.settings.limits, counting, tools)), tools.headers()


@post("/v1/messages", guards=[ready_guard], status_code=200)
async def create_message(request: Request[Any, Any, Any]) -> Response[Any]:
    """Answer a Messages request, whole or as Anthropic's event stream."""
    body, chat_run, dropped = await _prepared(request, counting=False)
    message_id = "msg_" + secrets.token_hex(12)
    store, owner = hypnos_state(request).threads, owner_of(request_context(request))

    async def save(message: dict[str, Any]) -> None:
        await save_turn(store, owner, body, message)

    await chat_run.open()
    if body.stream:
        return await chat_run.respond(lambda: _events(chat_run, message_id, save), dropped)
    finished, telemetry, headers = await chat_run.whole()
    stop_reason, stop_sequence = stop_of(finished)
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": body.model,
        "content": content_blocks(chat_run.answer.choice(0)),
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_of(finished),
        "hypnos_telemetry": telemetry,
    }
    await save(message)
    return json_response(message, headers={**headers, **dropped})


@post("/v1/messages/count_tokens", guards=[ready_guard], status_code=200)
async def count_tokens(request: Request[Any, Any, Any]) -> Response[bytes]:
    """How many input tokens a Messages request takes: the model renders and reads its prompt (one token made)."""
    _, chat_run, _ = await _prepared(request, counting=True)
    await chat_run.open()
    finished, _, _ = await chat_run.whole()
    return json_response({"input_tokens": finished.prompt_tokens})


def _sse(kind: str, **fields: Any) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + msgspec.json.encode({"type": kind, **fields}) + b"\n\n"


class _Blocks:
    """The content blocks of one stream, opened and closed as the kind of output changes."""

    def __init__(self) -> None:
        self.index = -1
        self.open: str | None = None

    def start(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        out = self.stop()
        self.index += 1
        self.open = kind
        out.append(_sse("content_block_start", index=self.index, content_block=block))
        return out

    def stop(self) -> list[bytes]:
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":
            out.append(
                _sse("content_block_delta", index=self.index, delta={"type": "signature_delta", "signature": ""})
            )
        self.open = None
        out.append(_sse("content_block_stop", index=self.index))
        return out

    def add(self, event: Any) -> list[bytes]:
        if event.index != 0:
            return []
        if isinstance(event, ReasoningDelta) and event.text:
            out = (
                []
                if self.open == "thinking"
                else self.start("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            )
            delta = {"type": "thinking_delta", "thinking": event.text}
            return [*out, _sse("content_block_delta", index=self.index, delta=delta)]
        if isinstance(event, ContentDelta) and event.text:
            out = [] if self.open == "text" else self.start("text", {"type": "text", "text": ""})
            return [
                *out,
                _sse("content_block_delta", index=self.index, delta={"type": "text_delta", "text": event.text}),
            ]
        if isinstance(event, ToolCallEvent):
            call = event.call
            out = self.start("tool_use", {"type": "tool_use", "id": call.id, "name": call.function.name, "input": {}})
            delta = {"type": "input_json_delta", "partial_json": call.function.arguments}
            return [*out, _sse("content_block_delta", index=self.index, delta=delta), *self.stop()]
        return []


async def _events(
    chat_run: ChatRun, message_id: str, save: Callable[[dict[str, Any]], Awaitable[None]]
) -> AsyncIterator[bytes]:
    """Anthropic's event stream of one answer; nothing goes out before the engine's first event (a ChatAccepted
    where the engine reports one: message_start then goes before the prefill, with the input tokens); the message is
    saved (a thread's turn) before message_stop."""
    run, answer = chat_run.run, chat_run.answer
    blocks, record = _Blocks(), run.record
    events = chat_run.events()
    following: asyncio.Future[Any] | None = None
    try:
        event = await anext(events, None)
        start = start_usage(event)
        message = {"id": message_id, "type": "message", "role": "assistant", "model": run.model, "content": []}
        yield _sse("message_start", message={**message, "stop_reason": None, "stop_sequence": None, "usage": start})
        yield _sse("ping")
        try:
            while event is not None:
                for chunk in blocks.add(event):
                    yield chunk
                following = asyncio.ensure_future(anext(events, None))
                while not (await asyncio.wait({following}, timeout=PING_SECS))[0]:
                    yield _sse("ping")  # a long prefill: the client's idle watchdog sees the stream alive
                event = following.result()
            finished = answer.final()
        except Exception as error:
            if isinstance(error, HypnosError):
                message_text = error.message
            else:
                logger.error("messages stream on %s failed", clip(run.model), exc_info=error)
                message_text = engine_failed_message(run.model)
            record.error, record.error_type = message_text, "api_error"
            yield _sse("error", error={"type": "api_error", "message": message_text})
            return
    finally:
        if following is not None and not following.done():  # the client left during a wait: its events end
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
        await events.aclose()
    telemetry = run.telemetry(finished.timing)
    for chunk in blocks.stop():
        yield chunk
    stop_reason, stop_sequence = stop_of(finished)
    delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    yield _sse("message_delta", delta=delta, usage=usage_of(finished), hypnos_telemetry=telemetry)
    final = {"id": message_id, "type": "message", "role": "assistant", "model": run.model, **delta}
    await save({**final, "content": content_blocks(answer.choice(0)), "usage": usage_of(finished)})
    yield _sse("message_stop")


ROUTES = [create_message, count_tokens]
