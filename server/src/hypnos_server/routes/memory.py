"""GET /v1/memory/status, POST /v1/memory/tier and GET|POST /v1/memory/kv-park (section 14), over the scheduler."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.errors import HypnosError
from hypnos.types import MemoryTier
from litestar import Request, Response, get, post

from hypnos_server.asgi.auth import ADMIN_OPT
from hypnos_server.routes.inference import decode_json, json_response, ready_guard
from hypnos_server.routes.models import log_model
from hypnos_server.state import hypnos_state


class TierRequest(msgspec.Struct, kw_only=True):
    """POST /v1/memory/tier body."""

    model: str
    target_tier: MemoryTier
    context_len: int | None = None


class KvParkRequest(msgspec.Struct, kw_only=True):
    """POST /v1/memory/kv-park body: either field may be left out, not both."""

    enabled: bool | None = None
    max_bytes: int | None = None


@get("/v1/memory/status")
async def memory_status(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The full tiers snapshot of section 14 (open during staging); latency comes from the observability layer. On
    a Ray cluster it adds `nodes`: every node's own snapshot with its node_id, address and alive."""
    state = hypnos_state(request)
    status = state.scheduler.status()
    if state.cluster is None:
        return json_response(status)
    return json_response({**msgspec.to_builtins(status), "nodes": await state.cluster.node_statuses()})


@post("/v1/memory/tier", guards=[ready_guard], status_code=200, opt={ADMIN_OPT: True})
async def move_tier(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Move a model by hand: 404 unknown or disabled, 429 model_busy while leased, 507 when it does not fit."""
    body = await decode_json(request, TierRequest)
    log_model(request, body.model)
    if body.context_len is not None and body.context_len < 1:
        raise HypnosError(400, "invalid_request_error", "context_len must be a positive number of tokens")
    state = hypnos_state(request)
    if state.cluster is not None:  # the front holds no model: the move happens on the nodes
        model = state.scheduler.serving(body.model).id  # 404 unknown or disabled, as on one machine
        placement = await state.cluster.move(model, body.target_tier, body.context_len)
        return json_response({"model": model, "placement": placement})
    moved = await state.scheduler.move(body.model, body.target_tier, context_len=body.context_len)
    return json_response({"model": moved.id, "placement": moved.placement})


@get("/v1/memory/kv-park")
async def kv_park_status(request: Request[Any, Any, Any]) -> Response[bytes]:
    """KV parking's state: enabled, cap, bytes held and each model's parked conversations (on a Ray cluster: over
    every node, each parked model with its node_id)."""
    state = hypnos_state(request)
    if state.cluster is not None:
        return json_response(await state.cluster.kv_park(None, None))
    return json_response(state.scheduler.kv_park.status())


@post("/v1/memory/kv-park", status_code=200, opt={ADMIN_OPT: True})
async def configure_kv_park(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Turn KV parking on or off (off drops every parked state) or change its cap (the oldest go until it fits)."""
    body = await decode_json(request, KvParkRequest)
    if body.enabled is None and body.max_bytes is None:
        raise HypnosError(400, "invalid_request_error", "Send `enabled`, `max_bytes` or both")
    if body.max_bytes is not None and body.max_bytes < 0:
        raise HypnosError(400, "invalid_request_error", "max_bytes must be zero or more")
    state = hypnos_state(request)
    store = state.scheduler.kv_park
    store.configure(enabled=body.enabled, max_bytes=body.max_bytes)  # on a cluster: what nodes that join start with
    if state.cluster is not None:
        return json_response(await state.cluster.kv_park(body.enabled, body.max_bytes))
    return json_response(store.status())


ROUTES = [memory_status, move_tier, kv_park_status, configure_kv_park]
