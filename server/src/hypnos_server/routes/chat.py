"""POST /v1/chat/completions (section 7): the wire request to one ChatRequest, whole answers; streams in chat_stream."""

from __future__ import annotations

import secrets
import time
from typing import Any

from hypnos.openai import ChatCompletionRequest
from litestar import Request, Response, post

from hypnos_server.routes.chat_input import chat_completion_request
from hypnos_server.routes.chat_run import ChatRun
from hypnos_server.routes.chat_stream import sse_body, usage_object
from hypnos_server.routes.inference import decode_json, json_response, ready_guard
from hypnos_server.state import hypnos_state, request_context


def completion_id() -> str:
    """A fresh `chatcmpl-<hex>` id."""
    return "chatcmpl-" + secrets.token_hex(12)


@post("/v1/chat/completions", guards=[ready_guard], status_code=200)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    """Answer a chat request, whole or as an SSE stream."""
    limits = hypnos_state(request).settings.limits
    record = request_context(request).record
    body = await decode_json(request, ChatCompletionRequest)
    record.model, record.stream = body.model, body.stream
    chat_run = ChatRun(request, chat_completion_request(body, limits))
    run, chat, answer = chat_run.run, chat_run.chat, chat_run.answer
    cid, created = completion_id(), int(time.time())
    await chat_run.open()
    if body.stream:
        include_usage = body.stream_options is not None and bool(body.stream_options.include_usage)
        return await chat_run.respond(lambda: sse_body(run, chat, answer, cid, created, include_usage))
    finished, telemetry, headers = await chat_run.whole()
    result = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": body.model,
        "choices": answer.choice_objects(chat),
        "usage": usage_object(finished),
        "hypnos_telemetry": telemetry,
    }
    return json_response(result, headers=headers)


ROUTES = [chat_completions]
