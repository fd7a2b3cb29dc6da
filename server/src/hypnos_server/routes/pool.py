"""POST /v1/models, PUT|DELETE /v1/models/{id} and GET /v1/models/catalog (section 6)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.errors import invalid_request, not_found
from hypnos.wire_kind import wire_engine
from litestar import Request, Response, delete, get, post, put

from hypnos_server.advisor import AdvisorRequest, advise, config_text, machine_for
from hypnos_server.asgi.auth import ADMIN_OPT
from hypnos_server.catalog import (
    Catalog,
    CatalogEntry,
    architecture_problem,
    configured_quant,
    file_state,
    variant_files,
)
from hypnos_server.model_pool import ModelPool
from hypnos_server.routes.inference import decode_json, json_response, ready_guard
from hypnos_server.state import HypnosState, hypnos_state

DEFAULT_DRAIN_SECS = 120.0


class PoolChangeRequest(msgspec.Struct, kw_only=True):
    """POST /v1/models and PUT /v1/models/{id} body: one of `catalog` and `config`, and drain_secs."""

    catalog: str | None = None
    config: str | None = None
    drain_secs: float = DEFAULT_DRAIN_SECS


def _pool(state: HypnosState) -> ModelPool:
    pool = state.pool
    if pool is None:  # built by create_app; a guard for apps assembled by hand
        raise not_found("this server cannot change its model pool")
    return pool


def _drain(value: float | str | None) -> float:
    if value is None:
        return DEFAULT_DRAIN_SECS
    try:
        seconds = float(value)
    except ValueError:
        raise invalid_request("drain_secs must be a number of seconds") from None
    if not seconds >= 0:
        raise invalid_request("drain_secs must be 0 or more")
    return seconds


@post("/v1/models", guards=[ready_guard], status_code=201, opt={ADMIN_OPT: True})
async def add_model(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Add a model to the pool (cold in tier 3); 400 with the reasons when a check fails or the id is taken."""
    body = await decode_json(request, PoolChangeRequest)
    pool = _pool(hypnos_state(request))
    model, persisted = await pool.add(pool.block_of(body.catalog, body.config))
    answer = {"model": model.id, "action": "added", "persisted": persisted, "placement": model.placement}
    return json_response(answer, status=201)


@put("/v1/models/{model_id:str}", guards=[ready_guard], status_code=200, opt={ADMIN_OPT: True})
async def replace_model(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Replace a model under its id once its running requests finished (429 model_busy past drain_secs)."""
    body = await decode_json(request, PoolChangeRequest)
    pool = _pool(hypnos_state(request))
    model_id = request.path_params["model_id"]
    block = pool.block_of(body.catalog, body.config)
    model, persisted = await pool.replace(model_id, block, _drain(body.drain_secs))
    answer = {"model": model.id, "action": "replaced", "persisted": persisted, "placement": model.placement}
    return json_response(answer)


@delete("/v1/models/{model_id:str}", guards=[ready_guard], status_code=200, opt={ADMIN_OPT: True})
async def remove_model(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Remove a model once its running requests finished (429 model_busy past drain_secs)."""
    pool = _pool(hypnos_state(request))
    model_id = request.path_params["model_id"]
    persisted = await pool.remove(model_id, _drain(request.query_params.get("drain_secs")))
    return json_response({"model": model_id, "action": "removed", "persisted": persisted})


def catalog_entry(state: HypnosState, catalog: Catalog, entry: CatalogEntry) -> dict[str, Any]:
    """One entry of GET /v1/models/catalog, with what of it is in models_dir and in the pool."""
    models_dir = state.settings.models_path
    configured = next((m for m in state.scheduler.models() if m.id == entry.id), None)
    variants = []
    for variant in entry.variants:
        files = []
        for file in variant_files(variant):
            present, outdated = file_state(models_dir, file)
            item = msgspec.to_builtins(file)
            item.pop("gated")
            if file.gated:
                item["gated"] = True
            files.append({**item, "present": present, "outdated": outdated})
        out: dict[str, Any] = {
            "quant": variant.quant,
            "default": variant.default,
            "size_bytes": sum(f.size or 0 for f in variant_files(variant)),
            "files": files,
            "installed": all(f["present"] for f in files),
            "outdated": any(f["outdated"] for f in files),
            "config_block": catalog.config_block(entry, variant),
        }
        problem = architecture_problem(models_dir, entry, variant, state.scheduler.engine_kinds)
        if problem is not None:
            out["problem"] = problem
        variants.append(out)
    engine, backend = wire_engine(entry.engine, entry.modality, state.scheduler.engine_kinds)
    answer: dict[str, Any] = {
        "id": entry.id,
        "name": entry.name,
        "publisher": entry.publisher,
        "license": entry.license,
        "modality": entry.modality,
        "additional_modalities": entry.additional_modalities,
        "engine": engine,
        "backend": backend,
        "engine_plugin": entry.engine,
        "capabilities": entry.capabilities,
        "summary": entry.summary,
        "lineup": entry.lineup,
        "configured": configured is not None,
        "enabled": configured is not None and configured.enabled,
        "variants": variants,
    }
    if entry.architecture is not None:
        answer["architecture"] = entry.architecture
    quant = configured_quant(configured.config if configured is not None else None, entry)
    if quant is not None:
        answer["configured_quant"] = quant
    return answer


@get("/v1/models/catalog", sync_to_thread=True)
def model_catalog(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The model catalog with what is installed; ?modality= keeps the entries serving it; open during staging."""
    state = hypnos_state(request)
    catalog = state.catalog
    if catalog is None:
        raise not_found("this server has no model catalog (models.catalog.toml)")
    modality = request.query_params.get("modality")
    entries = [e for e in catalog.entries.values() if modality is None or modality in e.modalities]
    return json_response(
        {
            "object": "list",
            "catalog_version": catalog.version,
            "models_dir": str(state.settings.models_path),
            "tested_architectures": catalog.tested_architectures,
            "data": [catalog_entry(state, catalog, entry) for entry in entries],
        }
    )


@post("/v1/advisor", status_code=200)
async def advisor(request: Request[Any, Any, Any]) -> Response[bytes]:
    """A lineup from the catalog for a machine and needs; 400 when nothing fits; open during staging."""
    state = hypnos_state(request)
    catalog = state.catalog
    if catalog is None:
        raise not_found("this server has no model catalog (models.catalog.toml)")
    body = await decode_json(request, AdvisorRequest)
    answer = advise(catalog, body.needs, machine_for(body, state.scheduler.hardware.info()))
    answer["config"] = config_text(catalog, answer)
    return json_response(answer)


ROUTES = [add_model, replace_model, remove_model, model_catalog, advisor]
