"""Anthropic message threads (anthropic-beta message-threads-2026-08-12): `thread: {"type": "create"}` keeps the
conversation (system, tools, messages and the reply) under the reply's id, per API key, in a SQLite file bounded like
stored responses; `{"type": "continue", "previous_message_id"}` sends only the new turn's messages."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from hypnos.errors import HypnosError, clip, invalid_request

from hypnos_server.responses_store import ResponseStore, StoredResponse
from hypnos_server.routes.messages_input import MessagesRequest

THREADS_FILE = "message_threads.sqlite3"
THREADS_BETA = "message-threads-2026-08-12"
THREAD_TYPES = {"create", "continue"}


def thread_error(status: int, code: str, message: str) -> HypnosError:
    """A thread refusal: its `error.details.error_code` is what the SDKs branch on (and replay the history after)."""
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    return HypnosError(status, kind, message, code=code)


def thread_type(body: MessagesRequest) -> str | None:
    """The request's `thread.type` ("create" or "continue"), None without a thread; 400 on a bad `thread`."""
    thread = body.thread
    if thread is None:
        return None
    kind = thread.get("type")
    if kind not in THREAD_TYPES:
        raise invalid_request(f"Invalid value for `thread.type`: `{clip(kind)}` (create or continue)")
    if kind == "continue" and not isinstance(thread.get("previous_message_id"), str):
        raise invalid_request("Missing required field `thread.previous_message_id`")
    return str(kind)


async def continued(store: ResponseStore | None, owner: str, body: MessagesRequest) -> MessagesRequest:
    """The request a `continue` means: the stored thread's system, tools and messages, then the new messages (404
    thread_not_found for an id this key has not stored; 400 thread_fingerprint_mismatch when the request changes the
    thread's system or tools). Any other request unchanged."""
    if thread_type(body) != "continue":
        return body
    assert body.thread is not None
    previous = str(body.thread["previous_message_id"])
    stored = None if store is None else await store.aget(previous, owner)
    if stored is None:
        raise thread_error(
            404, "thread_not_found", f"No message thread at `{clip(previous)}` (unknown, expired or another key's)"
        )
    held = stored.input_items[0] if stored.input_items else {}
    changed = [
        f"`{name}`"
        for name in ("system", "tools")
        if getattr(body, name) is not None and getattr(body, name) != held.get(name)
    ]
    if changed:
        raise thread_error(
            400,
            "thread_fingerprint_mismatch",
            f"{' and '.join(changed)} differ from the thread's; send the stored ones or start a new thread",
        )
    return msgspec.structs.replace(
        body, system=held.get("system"), tools=held.get("tools"), messages=[*stored.conversation, *body.messages]
    )


async def save_turn(store: ResponseStore | None, owner: str, body: MessagesRequest, message: dict[str, Any]) -> None:
    """Keep the thread as it stands after `message` (the reply), under the reply's id, for a later `continue`."""
    if store is None or body.thread is None:
        return
    reply = {"role": "assistant", "content": message["content"]}
    stored = StoredResponse(
        id=message["id"],
        owner=owner,
        created_at=time.time(),
        response={key: value for key, value in message.items() if key != "hypnos_telemetry"},
        input_items=[{"system": body.system, "tools": body.tools}],
        conversation=[*body.messages, reply],
    )
    await store.aput(stored)
