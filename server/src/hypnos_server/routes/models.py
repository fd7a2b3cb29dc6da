"""GET /v1/models and /v1/models/{id} (section 6), POST /v1/models/{id}/enable|disable and .../moe-offload."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.errors import HypnosError, model_not_found
from hypnos.scheduler import ModelState
from hypnos.types import MoeOffload
from litestar import Request, Response, get, post

from hypnos_server.routes.inference import decode_json, json_response, ready_guard
from hypnos_server.state import hypnos_state


def model_entry(state: ModelState, created: int) -> dict[str, Any]:
    """One entry of GET /v1/models."""
    return {
        "id": state.id,
        "object": "model",
        "created": created,
        "owned_by": "hypnos",
        "modality": str(state.config.modality),
        "current_tier": str(state.tier),
        "placement": state.placement,
        "active_leases": state.active_leases,
    }


@get("/v1/models", sync_to_thread=False)
def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The models in service (disabled ones hidden); open during staging."""
    state = hypnos_state(request)
    created = int(state.started_at)
    data = [model_entry(model, created) for model in state.scheduler.models() if model.enabled]
    return json_response({"object": "list", "data": data})


@get("/v1/models/{model_id:str}", sync_to_thread=False)
def retrieve_model(request: Request[Any, Any, Any], model_id: str) -> Response[bytes]:
    """One model's entry (the SDKs' models.retrieve); 404 model_not_found for an unknown or disabled id."""
    state = hypnos_state(request)
    model = state.scheduler.get(model_id)
    if not model.enabled:
        raise model_not_found(model.id)
    return json_response(model_entry(model, int(state.started_at)))


async def _set_enabled(request: Request[Any, Any, Any], model_id: str, enabled: bool) -> Response[bytes]:
    """Enable, or disable (evicted to tier 3; 429 model_busy while leased; 404 for an unknown id)."""
    model = await hypnos_state(request).scheduler.set_enabled(model_id, enabled)
    return json_response({"model": model.id, "enabled": model.enabled, "placement": model.placement})


@post("/v1/models/{model_id:str}/enable", guards=[ready_guard], status_code=200)
async def enable_model(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Put a model back in service (it loads on its next request)."""
    return await _set_enabled(request, request.path_params["model_id"], True)


@post("/v1/models/{model_id:str}/disable", guards=[ready_guard], status_code=200)
async def disable_model(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Take a model out of service; 429 model_busy while it is leased."""
    return await _set_enabled(request, request.path_params["model_id"], False)


class MoeOffloadRequest(msgspec.Struct, kw_only=True):
    """POST /v1/models/{id}/moe-offload body."""

    mode: str


@post("/v1/models/{model_id:str}/moe-offload", guards=[ready_guard], status_code=200)
async def set_moe_offload(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Set a model's expert offload: "now" when idle (a resident model drops to tier 2), else "next_load"."""
    body = await decode_json(request, MoeOffloadRequest)
    try:
        mode = MoeOffload(body.mode)
    except ValueError:
        choices = ", ".join(f'"{m.value}"' for m in MoeOffload)
        raise HypnosError(
            422,
            "invalid_request_error",
            f"Unknown moe_offload mode {body.mode!r}; use one of {choices}",
            code="invalid_value",
        ) from None
    applies, model = await hypnos_state(request).scheduler.set_moe_offload(request.path_params["model_id"], mode)
    return json_response(
        {"model": model.id, "moe_offload": str(model.moe_offload), "applies": applies, "placement": model.placement}
    )


ROUTES = [list_models, retrieve_model, enable_model, disable_model, set_moe_offload]
