"""GET /v1/memory/status and POST /v1/memory/tier (section 14), over the scheduler."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.errors import HypnosError
from hypnos.types import MemoryTier
from litestar import Request, Response, get, post

from hypnos_server.routes.inference import decode_json, json_response, ready_guard
from hypnos_server.state import hypnos_state


class TierRequest(msgspec.Struct, kw_only=True):
    """POST /v1/memory/tier body."""

    model: str
    target_tier: MemoryTier
    context_len: int | None = None


@get("/v1/memory/status", sync_to_thread=False)
def memory_status(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The full tiers snapshot of section 14 (open during staging); latency comes from the observability layer."""
    return json_response(hypnos_state(request).scheduler.status())


@post("/v1/memory/tier", guards=[ready_guard], status_code=200)
async def move_tier(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Move a model by hand: 404 unknown or disabled, 429 model_busy while leased, 507 when it does not fit."""
    body = await decode_json(request, TierRequest)
    if body.context_len is not None and body.context_len < 1:
        raise HypnosError(400, "invalid_request_error", "context_len must be a positive number of tokens")
    moved = await hypnos_state(request).scheduler.move(body.model, body.target_tier, context_len=body.context_len)
    return json_response({"model": moved.id, "placement": moved.placement})


ROUTES = [memory_status, move_tier]
