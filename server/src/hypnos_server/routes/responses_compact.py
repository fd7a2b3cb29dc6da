"""POST /v1/responses/compact: the model summarises a conversation (input items and/or previous_response_id) into a
compaction item that a later request carries as input in place of the turns it summarises."""

from __future__ import annotations

import time
from typing import Any

from litestar import Request, Response, post

from hypnos_server.routes.chat_run import ChatRun
from hypnos_server.routes.inference import decode_json, json_response, ready_guard
from hypnos_server.routes.responses import Conversation, owner_of
from hypnos_server.routes.responses_compaction import CompactRequest, compaction_item
from hypnos_server.routes.responses_input import ResponsesRequest, item_id, responses_request
from hypnos_server.routes.responses_output import usage_of
from hypnos_server.routes.responses_tools import ToolSet
from hypnos_server.state import hypnos_state, request_context

SUMMARY_TOKENS = 1024  # the most a summary may take
COMPACT_PROMPT = (
    "Write a summary of the conversation above that lets you continue it without the earlier turns: the user's "
    "goals and requests, decisions made, facts and results learned (tool results included), files or names "
    "mentioned, and what remains to be done. Write only the summary."
)


@post("/v1/responses/compact", guards=[ready_guard], status_code=200)
async def compact_response(request: Request[Any, Any, Any]) -> Response[bytes]:
    """A `response.compaction` object: the conversation's user messages, then one compaction item summarising it."""
    state = hypnos_state(request)
    context = request_context(request)
    body = await decode_json(request, CompactRequest)
    context.record.model = body.model
    as_response = ResponsesRequest(
        model=body.model,
        input=body.input or [],
        instructions=body.instructions,
        previous_response_id=body.previous_response_id,
        store=False,
        max_output_tokens=SUMMARY_TOKENS,
    )
    conversation = Conversation(state, owner_of(context), as_response)
    await conversation.load_history()
    items = [*conversation.history, *conversation.items]
    chat_request = responses_request(as_response, items, state.settings.limits, ToolSet(), extra=(COMPACT_PROMPT,))
    chat_run = ChatRun(request, chat_request)
    await chat_run.open()
    finished, telemetry, headers = await chat_run.whole()
    summary = "".join(chat_run.answer.choice(0).text).strip()
    kept = [item for item in items if item.get("type") == "message" and item.get("role") == "user"]
    compacted = {
        "id": item_id("resp"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*({**item, "status": "completed"} for item in kept), compaction_item(summary)],
        "usage": usage_of(finished),
        "hypnos_telemetry": telemetry,
    }
    return json_response(compacted, headers=headers)


ROUTES = [compact_response]
