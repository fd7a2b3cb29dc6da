"""Stored responses: GET /v1/responses/{id}, its input_items, DELETE, and POST .../cancel of one in progress."""

from __future__ import annotations

from typing import Any

from hypnos.errors import HypnosError, clip, invalid_request, not_found
from litestar import Request, Response, delete, get, post
from litestar.response import Stream

from hypnos_server.responses_store import StoredResponse
from hypnos_server.routes.inference import json_response
from hypnos_server.routes.responses import owner_of
from hypnos_server.routes.responses_stream import DONE, ending_with_done
from hypnos_server.state import hypnos_state, request_context

MAX_LIST_LIMIT = 100
NO_CACHE = {"cache-control": "no-cache"}


def _unknown(response_id: str) -> HypnosError:
    return not_found(f"No stored response `{clip(response_id)}` (unknown, expired, deleted or another key's)")


async def _stored(request: Request[Any, Any, Any], response_id: str) -> StoredResponse:
    store = hypnos_state(request).responses
    stored = None if store is None else await store.aget(response_id, owner_of(request_context(request)))
    if stored is None:
        raise _unknown(response_id)
    return stored


@get("/v1/responses/{response_id:str}")
async def retrieve_response(request: Request[Any, Any, Any]) -> Response[Any]:
    """A response of the caller's key as it stands (one being generated, or stored); `stream=true` follows a
    background response's events live, from after `starting_after`."""
    response_id = request.path_params["response_id"]
    query = request.query_params
    stream = query.get("stream", "false").lower()
    if stream not in ("true", "false"):
        raise invalid_request("Invalid value for `stream`: `true` or `false`")
    try:
        starting_after = int(query.get("starting_after", "-1"))
    except ValueError:
        starting_after = -2
    if starting_after < -1:
        raise invalid_request("Invalid value for `starting_after`: a sequence number (an integer >= 0)")
    live = hypnos_state(request).live_responses.get(response_id)
    if live is not None:  # another key's (or an unstored, or a discarded conversation's) is not the caller's to see
        mine = live.owner == owner_of(request_context(request)) and live.meta.body.store
        if not mine or (live.conversation is not None and live.conversation.discarded):
            live = None
    if stream == "true":
        if live is not None and live.log is not None:
            followed = ending_with_done(live.log.follow(starting_after))
            return Stream(followed, media_type="text/event-stream", headers=NO_CACHE)
        await _stored(request, response_id)  # 404 unless the caller's
        store = hypnos_state(request).responses
        events = None if store is None else await store.aevents(response_id, owner_of(request_context(request)))
        if events is None:
            raise invalid_request(
                f"The response `{clip(response_id)}` has no event stream to replay (only a background response "
                "has one, kept once it finished); GET it without `stream`"
            )
        return Response(
            content=b"".join([*events[starting_after + 1 :], DONE]), media_type="text/event-stream", headers=NO_CACHE
        )
    if live is not None:
        return json_response(live.snapshot())
    return json_response((await _stored(request, response_id)).response)


@get("/v1/responses/{response_id:str}/input_items")
async def list_input_items(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The input items of a stored response, as a cursor page (`limit`, `order`, `after`)."""
    response_id = request.path_params["response_id"]
    stored = await _stored(request, response_id)
    return json_response(item_page(stored.input_items, request.query_params))


def item_page(listed: list[dict[str, Any]], query: Any) -> dict[str, Any]:
    """A cursor page of items (`limit`, `order` (desc by default), `after`), as OpenAI's lists are."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request("Invalid value for `order`: `asc` or `desc`")
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise invalid_request(f"Invalid value for `limit`: an integer 1..{MAX_LIST_LIMIT}")
    items = list(listed) if order == "asc" else list(reversed(listed))
    after = query.get("after")
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise invalid_request(f"Invalid value for `after`: no item `{clip(after)}`")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Delete a stored response of the caller's key."""
    response_id = request.path_params["response_id"]
    state = hypnos_state(request)
    owner = owner_of(request_context(request))
    live = state.live_responses.get(response_id)
    if live is not None and live.owner == owner and live.conversation is not None:
        live.conversation.discarded = True  # a background response deleted while it runs stops, and stays deleted
        live.cancel()
    store = state.responses
    deleted = store is not None and await store.adelete(response_id, owner)
    if not deleted:
        raise _unknown(response_id)
    return json_response({"id": response_id, "object": "response.deleted", "deleted": True})


@post("/v1/responses/{response_id:str}/cancel", status_code=200)
async def cancel_response(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Stop a response of the caller's key that is being generated; its Response, status cancelled."""
    response_id = request.path_params["response_id"]
    state = hypnos_state(request)
    owner = owner_of(request_context(request))
    live = state.live_responses.get(response_id)
    if live is not None and live.owner == owner:
        return json_response(live.cancel())
    store = state.responses
    stored = None if store is None else await store.aget(response_id, owner)
    if stored is not None and stored.response.get("status") == "cancelled":
        return json_response(stored.response)  # cancelling twice answers the cancelled response again (OpenAI's way)
    if stored is not None:
        raise invalid_request(f"The response `{clip(response_id)}` is no longer in progress; nothing to cancel")
    raise _unknown(response_id)


ROUTES = [retrieve_response, list_input_items, delete_response, cancel_response]
