"""The Conversations API (/v1/conversations and its items), in OpenAI's shapes: a conversation per API key that
responses read their history from (`conversation`) and add their items to."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.errors import HypnosError, clip, invalid_request
from litestar import Request, Response, delete, get, post

from hypnos_server.conversations_store import ConversationStore, StoredConversation
from hypnos_server.routes.inference import decode_json, json_response
from hypnos_server.routes.responses import owner_of
from hypnos_server.routes.responses_conversation import unknown_conversation
from hypnos_server.routes.responses_input import ResponsesRequest, input_items
from hypnos_server.routes.responses_stored import item_page
from hypnos_server.state import hypnos_state, request_context

MAX_ITEMS_PER_CALL = 20  # OpenAI's bound on the items one create adds
MAX_METADATA = 16


class ConversationCreate(msgspec.Struct, kw_only=True):
    """POST /v1/conversations body."""

    items: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None


class ConversationUpdate(msgspec.Struct, kw_only=True):
    """POST /v1/conversations/{id} body."""

    metadata: dict[str, str]


class ItemsCreate(msgspec.Struct, kw_only=True):
    """POST /v1/conversations/{id}/items body."""

    items: list[dict[str, Any]]


def _store(request: Request[Any, Any, Any]) -> ConversationStore:
    store = hypnos_state(request).responses
    if store is None:
        raise HypnosError(503, "server_error", "The server keeps no stored state (no data directory)")
    return store.conversations


def _items(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items as responses read them (each with an id); at most MAX_ITEMS_PER_CALL."""
    if len(raw) > MAX_ITEMS_PER_CALL:
        raise invalid_request(f"Invalid value for `items`: at most {MAX_ITEMS_PER_CALL} items per call")
    return input_items(ResponsesRequest(model="", input=raw))


def _metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    if metadata is not None and len(metadata) > MAX_METADATA:
        raise invalid_request(f"Invalid value for `metadata`: at most {MAX_METADATA} keys")
    return metadata or {}


async def _conversation(request: Request[Any, Any, Any]) -> StoredConversation:
    store = _store(request)
    ident = request.path_params["conversation_id"]
    found = await store.arun(store.get, ident, owner_of(request_context(request)))
    if found is None:
        raise unknown_conversation(ident)
    return found


@post("/v1/conversations", status_code=200)
async def create_conversation(request: Request[Any, Any, Any]) -> Response[bytes]:
    """A new conversation of the caller's key, with its first items."""
    body = await decode_json(request, ConversationCreate)
    items, metadata = _items(body.items or []), _metadata(body.metadata)
    store = _store(request)
    created = await store.arun(store.create, owner_of(request_context(request)), metadata, items)
    return json_response(created.wire())


@get("/v1/conversations/{conversation_id:str}")
async def retrieve_conversation(request: Request[Any, Any, Any]) -> Response[bytes]:
    """A conversation of the caller's key."""
    return json_response((await _conversation(request)).wire())


@post("/v1/conversations/{conversation_id:str}", status_code=200)
async def update_conversation(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Replace a conversation's metadata."""
    body = await decode_json(request, ConversationUpdate)
    conversation = await _conversation(request)
    store = _store(request)
    await store.arun(store.update, conversation.id, conversation.owner, _metadata(body.metadata))
    return json_response((await _conversation(request)).wire())


@delete("/v1/conversations/{conversation_id:str}", status_code=200)
async def delete_conversation(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Delete a conversation of the caller's key, with its items."""
    conversation = await _conversation(request)
    store = _store(request)
    await store.arun(store.delete, conversation.id, conversation.owner)
    return json_response({"id": conversation.id, "object": "conversation.deleted", "deleted": True})


@get("/v1/conversations/{conversation_id:str}/items")
async def list_items(request: Request[Any, Any, Any]) -> Response[bytes]:
    """A conversation's items as a cursor page (`limit`, `order`, `after`)."""
    conversation = await _conversation(request)
    store = _store(request)
    return json_response(item_page(await store.arun(store.items, conversation.id), request.query_params))


@post("/v1/conversations/{conversation_id:str}/items", status_code=200)
async def create_items(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Add items at the end of a conversation; the list of those added."""
    body = await decode_json(request, ItemsCreate)
    conversation = await _conversation(request)
    items = _items(body.items)
    store = _store(request)
    if not await store.arun(store.append, conversation.id, conversation.owner, items):
        raise unknown_conversation(conversation.id)
    page = {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": False,
    }
    return json_response(page)


async def _item(request: Request[Any, Any, Any]) -> tuple[StoredConversation, dict[str, Any]]:
    conversation = await _conversation(request)
    store = _store(request)
    ident = request.path_params["item_id"]
    for item in await store.arun(store.items, conversation.id):
        if item.get("id") == ident:
            return conversation, item
    raise HypnosError(404, "not_found", f"The conversation has no item `{clip(ident)}`", code="item_not_found")


@get("/v1/conversations/{conversation_id:str}/items/{item_id:str}")
async def retrieve_item(request: Request[Any, Any, Any]) -> Response[bytes]:
    """One item of a conversation."""
    return json_response((await _item(request))[1])


@delete("/v1/conversations/{conversation_id:str}/items/{item_id:str}", status_code=200)
async def delete_item(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Remove one item of a conversation; the conversation."""
    conversation, item = await _item(request)
    store = _store(request)
    await store.arun(store.delete_item, conversation.id, item["id"])
    return json_response(conversation.wire())


ROUTES = [
    create_conversation,
    retrieve_conversation,
    update_conversation,
    delete_conversation,
    list_items,
    create_items,
    retrieve_item,
    delete_item,
]
