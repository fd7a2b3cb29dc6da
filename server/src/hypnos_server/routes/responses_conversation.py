"""The Responses `conversation` field: the stored conversation a response reads its history from and adds its input
and output items to (the Conversations API's, per API key)."""

from __future__ import annotations

from typing import Any

from hypnos.errors import HypnosError, clip, invalid_request

from hypnos_server.state import HypnosState

FINAL = ("completed", "incomplete")  # a response that ends so adds its items to its conversation


def conversation_id(conversation: str | dict[str, Any] | None, previous_response_id: str | None) -> str | None:
    """The id a request's `conversation` names (a string or `{"id": ...}`); 400 beside previous_response_id."""
    if conversation is None:
        return None
    ident = conversation if isinstance(conversation, str) else conversation.get("id")
    if not isinstance(ident, str) or not ident:
        raise invalid_request("Invalid value for `conversation`: a conversation id, or an object with its `id`")
    if previous_response_id is not None:
        raise HypnosError(
            400,
            "invalid_request_error",
            "`conversation` and `previous_response_id` cannot be used together: a conversation keeps its own history",
            code="invalid_request",
            param="conversation",
        )
    return ident


def unknown_conversation(ident: str) -> HypnosError:
    """404 for a conversation this key does not have."""
    return HypnosError(
        404,
        "not_found",
        f"Conversation with id `{clip(ident)}` not found (unknown, expired, deleted or another key's)",
        code="conversation_not_found",
        param="conversation",
    )


async def conversation_history(state: HypnosState, owner: str, ident: str) -> list[dict[str, Any]]:
    """The items of this key's conversation, oldest first (404 when it has none such)."""
    store = state.responses
    conversations = None if store is None else store.conversations
    if conversations is None or await conversations.arun(conversations.get, ident, owner) is None:
        raise unknown_conversation(ident)
    return await conversations.arun(conversations.items, ident)


async def add_to_conversation(state: HypnosState, owner: str, ident: str, items: list[dict[str, Any]]) -> None:
    """Append a finished response's input and output items to its conversation (gone meanwhile: nothing)."""
    store = state.responses
    if store is not None and items:
        await store.conversations.arun(store.conversations.append, ident, owner, items)
