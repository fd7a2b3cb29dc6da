"""POST /v1/responses: a Responses request mapped to one ChatRequest on the chat runner, answered whole or as
`response.*` events."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from hypnos.errors import HypnosError, clip, invalid_request
from litestar import Request, Response, post
from litestar.response import Stream

from hypnos_server.responses_store import StoredResponse
from hypnos_server.routes.chat_run import ChatRun
from hypnos_server.routes.chat_stream import ChatAccumulator
from hypnos_server.routes.inference import (
    Caller,
    InferenceRun,
    decode_json,
    engine_failed_message,
    json_response,
    ready_guard,
)
from hypnos_server.routes.responses_background import EventLog, StopSwitch, detached_context, finish_detached
from hypnos_server.routes.responses_conversation import (
    FINAL,
    add_to_conversation,
    conversation_history,
    conversation_id,
)
from hypnos_server.routes.responses_input import ResponsesRequest, input_items, responses_request
from hypnos_server.routes.responses_output import ResponseMeta, conversation_items, output_items, status_of, usage_of
from hypnos_server.routes.responses_stream import ResponseEvents, ending_with_done
from hypnos_server.state import HypnosState, RequestContext, hypnos_state, request_context
from hypnos_server.storage import StorageFull

logger = logging.getLogger(__name__)


def owner_of(context: RequestContext) -> str:
    """Whose stored responses a request sees: its key's label ("" when the server has no keys)."""
    return context.key.label if context.key is not None else ""


@dataclass
class LiveResponse:
    """A response being generated: who may cancel it, its cancel switch, and what it has output so far."""

    owner: str
    meta: ResponseMeta
    run: InferenceRun
    events: ResponseEvents | None = None
    cancelled: bool = False
    answer: ChatAccumulator | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    log: EventLog | None = None  # a background response's events, for GET ...?stream=true
    switch: StopSwitch | None = None  # a background response's stand-in client
    conversation: Conversation | None = None  # where a background response is stored (discarded by a DELETE)

    def snapshot(self) -> dict[str, Any]:
        """The Response as it stands: queued (waiting for its model), in_progress or cancelled."""
        status = "cancelled" if self.cancelled else "in_progress" if self.run.leased else "queued"
        return self.meta.response(status, list(self.events.output) if self.events is not None else [])

    def cancel(self) -> dict[str, Any]:
        """Stop the generation at its next token (or take it out of the queue); the Response, status cancelled."""
        self.cancelled = True
        if self.switch is not None:
            self.switch.stop()
        if self.run.leased:
            self.run.lease.cancel.cancel()
        return self.snapshot()


class Conversation:
    """One request's place in its stored conversation: what came before, its own items, and how to save it."""

    def __init__(self, state: HypnosState, owner: str, body: ResponsesRequest) -> None:
        self.state, self.owner, self.body = state, owner, body
        self.history: list[dict[str, Any]] = []
        self.items = input_items(body)
        self.discarded = False  # deleted while it ran: nothing more is stored
        self.conversation_id = conversation_id(body.conversation, body.previous_response_id)

    async def load_history(self) -> None:
        """The items of `conversation`, or the conversation of previous_response_id (404 when this key has no such
        conversation or stored response)."""
        if self.conversation_id is not None:
            self.history = await conversation_history(self.state, self.owner, self.conversation_id)
            return
        previous = self.body.previous_response_id
        if previous is None:
            return
        store = self.state.responses
        stored = None if store is None else await store.aget(previous, self.owner)
        if stored is None:
            raise HypnosError(
                404,
                "not_found",
                f"Previous response with id `{clip(previous)}` not found (unknown, expired, deleted or another key's)",
                code="previous_response_not_found",
                param="previous_response_id",
            )
        self.history = stored.conversation

    async def save(self, meta: ResponseMeta, response: dict[str, Any], pending: bool = False) -> None:
        """Store the response (when `store`) in one transaction, before the client hears that it completed;
        `pending`: a background response that has not finished yet. A finished response of a `conversation` adds
        its input and output items to it."""
        store = self.state.responses
        if self.conversation_id and not pending and not self.discarded and response["status"] in FINAL:
            await add_to_conversation(self.state, self.owner, self.conversation_id, [*self.items, *response["output"]])
        if not self.body.store or store is None or self.discarded:
            return
        conversation = [*self.history, *self.items, *conversation_items(response["output"])]
        stored = StoredResponse(
            id=meta.id,
            owner=self.owner,
            created_at=time.time(),
            response=response,
            input_items=self.items,
            conversation=conversation,
        )
        await store.aput(stored, pending)


@post("/v1/responses", guards=[ready_guard], status_code=200)
async def create_response(request: Request[Any, Any, Any]) -> Response[Any]:
    """Answer a Responses request, whole or as the Responses event stream; stored unless `store` is false."""
    state = hypnos_state(request)
    limits = state.settings.limits
    context = request_context(request)
    body = await decode_json(request, ResponsesRequest)
    context.record.model, context.record.stream = body.model, body.stream
    if body.background and not body.store:
        raise invalid_request("`background` needs `store`: a background response is read back by its id")
    meta = ResponseMeta(body)
    conversation = Conversation(state, owner_of(context), body)
    await conversation.load_history()
    chat_request = responses_request(body, [*conversation.history, *conversation.items], limits, meta.tools)
    summary = bool((body.reasoning or {}).get("summary"))
    if body.background:
        await chat_request.load(limits)  # a bad image is the request's 400, not the background run's failure
        switch = StopSwitch()
        detached = detached_context(context)
        try:
            caller = replace(Caller.of(request), context=detached, receive=switch.receive)
            return await _start_background(state, ChatRun(caller, chat_request), conversation, meta, summary, switch)
        except BaseException:  # refused before the run started (modality, disabled, store full): the slot goes back
            context.release_permit = detached.take_permit()
            raise
    chat_run = ChatRun(request, chat_request)
    await chat_run.open()
    live = LiveResponse(owner=conversation.owner, meta=meta, run=chat_run.run, answer=chat_run.answer)
    state.live_responses[meta.id] = live
    context.defer(_forget(state, meta.id))
    if body.stream:
        live.events = ResponseEvents(summary, meta.tools)

        def body_events() -> AsyncIterator[bytes]:
            return ending_with_done(events_body(chat_run, live, conversation))

        return await chat_run.respond(body_events, meta.tools.headers())
    finished, telemetry, headers = await chat_run.whole()
    status, reason = ("cancelled", None) if live.cancelled else status_of(finished.finish_reason)
    output = output_items(chat_run.answer.choice(0), summary, meta.tools)
    response = meta.response(status, output, usage_of(finished), incomplete=reason, hypnos_telemetry=telemetry)
    await conversation.save(meta, response)
    return json_response(response, headers={**headers, **meta.tools.headers()})


async def _start_background(
    state: HypnosState,
    chat_run: ChatRun,
    conversation: Conversation,
    meta: ResponseMeta,
    summary: bool,
    switch: StopSwitch,
) -> Response[Any]:
    """Store the response as queued, run it in a task of its own and answer at once: the queued Response, or (with
    `stream`) its event stream followed live; a hang-up of that stream leaves the generation running."""
    body = conversation.body
    live = LiveResponse(
        owner=conversation.owner,
        meta=meta,
        run=chat_run.run,
        events=ResponseEvents(summary, meta.tools),
        answer=chat_run.answer,
        log=EventLog(),
        switch=switch,
        conversation=conversation,
    )
    queued = meta.response("queued")
    await conversation.save(meta, queued, pending=True)
    state.live_responses[meta.id] = live
    task = asyncio.create_task(_run_background(state, live, chat_run, conversation), name=f"hypnos-{meta.id}")
    state.background.add(task)
    task.add_done_callback(state.background.discard)
    assert live.log is not None
    headers = meta.tools.headers()
    if body.stream:
        headers["cache-control"] = "no-cache"
        return Stream(ending_with_done(live.log.follow()), media_type="text/event-stream", headers=headers)
    return json_response(queued, headers=headers)


async def _run_background(
    state: HypnosState, live: LiveResponse, chat_run: ChatRun, conversation: Conversation
) -> None:
    """A background response from its queue to its stored end: completed, incomplete, failed or cancelled; at a
    shutdown, failed (a crash leaves it pending, and the store fails it at the next start)."""
    run, meta, log = live.run, live.meta, live.log
    assert log is not None
    status, shutdown = 200, False
    try:
        try:
            await chat_run.open()
            if live.cancelled:  # cancelled as the lease was granted
                run.lease.cancel.cancel()
            async for _ in run.stream(lambda _lease: log.record(events_body(chat_run, live, conversation))):
                pass
        except HypnosError as error:  # refused in the queue or before the first token (a prompt past the context)
            status = 499 if live.cancelled else error.status
            run.record.error, run.record.error_type = error.message, error.type
            failure = None if live.cancelled else {"code": error.type, "message": error.message}
            response = meta.response("cancelled" if live.cancelled else "failed", error=failure)
            await conversation.save(meta, response)
            if live.events is not None:  # a follower of the stream hears how it ended
                log.add(live.events.event("response.failed", response=response))
            return
        status = 499 if live.cancelled else 500 if run.record.error else 200
    except StorageFull as error:  # its end could not be stored: the store reports it failed (and writes it later)
        logger.error("background response %s could not be stored: %s", meta.id, error.message)
        status = 507
    except asyncio.CancelledError:
        shutdown, status = True, 503
        live.cancelled = True
        raise
    except Exception as error:
        logger.error("background response %s on %s failed", meta.id, clip(run.model), exc_info=error)
        status = 500
        failure = {"code": "server_error", "message": engine_failed_message(run.model)}
        await conversation.save(meta, meta.response("failed", error=failure))
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await finish_detached(state, run.context, status)  # the generation has stopped and saved its end
                if shutdown:
                    output = list(live.events.output) if live.events is not None else []
                    stopped = {
                        "code": "server_error",
                        "message": "The server shut down while this response was running",
                    }
                    await conversation.save(meta, meta.response("failed", output, error=stopped))
                if state.responses is not None:
                    await state.responses.aput_events(meta.id, log.events)
            except StorageFull as error:
                logger.error("background response %s: its end or events could not be stored: %s", meta.id, error)
            finally:  # even when the store cannot be written: followers end, GET reads the store
                log.close()
                state.live_responses.pop(meta.id, None)


def _forget(state: HypnosState, response_id: str):
    async def forget() -> None:
        state.live_responses.pop(response_id, None)

    return forget


async def events_body(chat_run: ChatRun, live: LiveResponse, conversation: Conversation) -> AsyncIterator[bytes]:
    """The Responses event stream of one answer (HTTP or WebSocket); nothing goes out before the engine's first
    event."""
    run, meta, events, record = chat_run.run, live.meta, live.events, chat_run.run.record
    assert events is not None
    engine_events = chat_run.events()
    try:
        event = await anext(engine_events, None)
        yield events.event("response.created", response=meta.response("in_progress"))
        yield events.event("response.in_progress", response=meta.response("in_progress"))
        try:
            while event is not None:
                for chunk in events.add(event):
                    yield chunk
                event = await anext(engine_events, None)
            finished = chat_run.answer.final()
        except Exception as error:
            if isinstance(error, HypnosError):
                message, kind = error.message, error.type
            else:
                logger.error("responses stream on %s failed", clip(run.model), exc_info=error)
                message, kind = engine_failed_message(run.model), "server_error"
            record.error, record.error_type = message, kind
            for chunk in events.close("incomplete"):
                yield chunk
            status = "cancelled" if live.cancelled else "failed"
            response = meta.response(status, events.output, error={"code": kind, "message": message})
            await conversation.save(meta, response)
            yield events.event("response.failed", response=response)
            return
    finally:
        await engine_events.aclose()
    telemetry = run.telemetry(finished.timing)
    status, reason = ("cancelled", None) if live.cancelled else status_of(finished.finish_reason)
    for chunk in events.finish(status):
        yield chunk
    usage = usage_of(finished)
    response = meta.response(status, events.output, usage, incomplete=reason, hypnos_telemetry=telemetry)
    try:
        await conversation.save(meta, response)
    except StorageFull as error:  # the answer is out, but not stored: the stream says so
        record.error, record.error_type = error.message, error.type
        failed = meta.response("failed", events.output, usage, error={"code": error.type, "message": error.message})
        yield events.event("response.failed", response=failed)
        return
    kind = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(status, "response.failed")
    yield events.event(kind, response=response)


ROUTES = [create_response]
