"""GET /v1/models and /v1/models/{id} (section 6), POST /v1/models/{id}/enable|disable and .../moe-offload."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.errors import HypnosError, model_not_found
from hypnos.scheduler import ModelState
from hypnos.types import Modality, MoeOffload
from litestar import Request, Response, get, post

from hypnos_server.asgi.auth import ADMIN_OPT
from hypnos_server.routes.inference import decode_json, json_response, ready_guard
from hypnos_server.state import hypnos_state, request_context


def model_entry(state: ModelState, created: int) -> dict[str, Any]:
    """One entry of GET /v1/models (with the API's engine kind and the backend); a speech model's also its voices."""
    engine, backend = state.wire_engine
    entry = {
        "id": state.id,
        "object": "model",
        "created": created,
        "owned_by": "hypnos",
        "modality": str(state.config.modality),
        "engine": engine,
        "backend": backend,
        "engine_plugin": state.config.engine,
        "current_tier": str(state.tier),
        "placement": state.placement,
        "active_leases": state.active_leases,
    }
    if Modality.TEXT_TO_SPEECH in state.modalities and state.engine is not None:
        capabilities = state.engine.capabilities()
        if capabilities.voices is not None:
            entry["voices"] = capabilities.voices
        if capabilities.voice_languages:  # which voice speaks which language natively (a Japanese voice pack: ja)
            entry["voice_languages"] = capabilities.voice_languages
    return entry


@get("/v1/models")
async def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The models in service (disabled ones hidden); open during staging. On a Ray cluster a model's tier and
    placement are those of the node holding it highest, its active_leases the sum over the nodes."""
    state = hypnos_state(request)
    created = int(state.started_at)
    data = [model_entry(model, created) for model in state.scheduler.models() if model.enabled]
    if state.cluster is not None:
        merge_nodes(data, await state.cluster.node_statuses())
    return json_response({"object": "list", "data": data})


def merge_nodes(entries: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> None:
    """Put each model's best tier (with its placement) and total leases over the live nodes into its entry."""
    held = [model for node in nodes if node["alive"] for model in node.get("models", [])]
    for entry in entries:
        copies = [model for model in held if model["id"] == entry["id"]]
        if not copies:
            continue
        best = min(copies, key=lambda model: model["current_tier"])  # tier1_... < tier2_... < tier3_...
        entry.update(current_tier=best["current_tier"], placement=best["placement"])
        entry["active_leases"] = sum(model["active_leases"] for model in copies)


@get("/v1/models/{model_id:str}", sync_to_thread=False)
def retrieve_model(request: Request[Any, Any, Any], model_id: str) -> Response[bytes]:
    """One model's entry (the SDKs' models.retrieve); 404 model_not_found for an unknown or disabled id."""
    state = hypnos_state(request)
    model = state.scheduler.get(model_id)
    if not model.enabled:
        raise model_not_found(model.id)
    return json_response(model_entry(model, int(state.started_at)))


def log_model(request: Request[Any, Any, Any], model_id: str) -> None:
    """Name the model an admin route acts on in its request-log record (the route shows only the template)."""
    request_context(request).record.model = model_id


async def _set_enabled(request: Request[Any, Any, Any], model_id: str, enabled: bool) -> Response[bytes]:
    """Enable, or disable (evicted to tier 3; 429 model_busy while leased; 404 for an unknown id)."""
    log_model(request, model_id)
    state = hypnos_state(request)
    if state.cluster is not None:  # every node first (a node where it is leased refuses), then the front's gate
        state.scheduler.get(model_id)
        await state.cluster.set_enabled(model_id, enabled)
    model = await state.scheduler.set_enabled(model_id, enabled)
    return json_response({"model": model.id, "enabled": model.enabled, "placement": model.placement})


@post("/v1/models/{model_id:str}/enable", guards=[ready_guard], status_code=200, opt={ADMIN_OPT: True})
async def enable_model(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Put a model back in service (it loads on its next request)."""
    return await _set_enabled(request, request.path_params["model_id"], True)


@post("/v1/models/{model_id:str}/disable", guards=[ready_guard], status_code=200, opt={ADMIN_OPT: True})
async def disable_model(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Take a model out of service; 429 model_busy while it is leased."""
    return await _set_enabled(request, request.path_params["model_id"], False)


class MoeOffloadRequest(msgspec.Struct, kw_only=True):
    """POST /v1/models/{id}/moe-offload body."""

    mode: str


@post("/v1/models/{model_id:str}/moe-offload", guards=[ready_guard], status_code=200, opt={ADMIN_OPT: True})
async def set_moe_offload(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Set a model's expert offload: "now" when idle (a resident model drops to tier 2), else "next_load"."""
    log_model(request, request.path_params["model_id"])
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
    state = hypnos_state(request)
    applies, model = await state.scheduler.set_moe_offload(request.path_params["model_id"], mode)
    if state.cluster is not None:  # the front holds no model: when it applies is the nodes' answer
        applies = await state.cluster.set_moe_offload(model.id, mode)
    return json_response(
        {"model": model.id, "moe_offload": str(model.moe_offload), "applies": applies, "placement": model.placement}
    )


ROUTES = [list_models, retrieve_model, enable_model, disable_model, set_moe_offload]
