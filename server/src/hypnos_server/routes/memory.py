"""GET /v1/memory/status and POST /v1/memory/tier (section 14): thin first versions over the scheduler."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.errors import HypnosError, model_disabled
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
    """The tiers snapshot: the scheduler's own when it offers one, else capabilities and per-model state."""
    state = hypnos_state(request)
    scheduler = state.scheduler
    snapshot = getattr(scheduler, "status", None)
    if snapshot is not None:
        return json_response(snapshot())
    hardware = state.settings.hardware
    models = [
        {
            "id": model.id,
            "enabled": model.enabled,
            "modality": str(model.config.modality),
            "modalities": [str(m) for m in model.config.all_modalities],
            "engine": model.config.engine,
            "priority": str(model.config.priority),
            "current_tier": str(model.tier),
            "placement": model.placement,
            "active_leases": model.active_leases,
            "total_requests_served": model.total_requests_served,
        }
        for model in scheduler.models()
    ]
    capabilities = {
        "accelerator": "Cpu",
        "simulated": True,
        "usable_vram_budget_bytes": hardware.simulate_vram_bytes or hardware.vram_budget_bytes or 0,
        "pinned_ram_budget_bytes": hardware.pinned_ram_budget_bytes or 0,
    }
    return json_response({"capabilities": capabilities, "models": models})


@post("/v1/memory/tier", guards=[ready_guard], status_code=200)
async def move_tier(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Move a model by hand; the scheduler's move() does the work."""
    body = await decode_json(request, TierRequest)
    scheduler = hypnos_state(request).scheduler
    model = scheduler.get(body.model)
    if not model.enabled:
        raise model_disabled(body.model)
    mover = getattr(scheduler, "move", None)
    if mover is None:
        raise HypnosError(503, "model_not_available", "Manual tier moves are not available in this build")
    moved = await mover(body.model, body.target_tier, context_len=body.context_len)
    return json_response({"model": moved.id, "placement": moved.placement})


ROUTES = [memory_status, move_tier]
