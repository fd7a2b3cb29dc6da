"""POST /v1/entities (spec section 13), through the server's request pipeline: auth, key limits, lease, telemetry.

Imported only by the `hypnos_routes` hook, which only the server calls: the route uses the server's own inference
helpers (decoding, staging guard, lease, error mapping) so that it behaves like every built-in route.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from hypnos.engine import EntityInput
from hypnos.errors import invalid_request
from hypnos.types import Modality
from hypnos_server.routes.inference import (
    call_engine,
    decode_json,
    json_response,
    lease_for,
    note_lease,
    ready_guard,
    wait_headers,
)
from hypnos_server.state import hypnos_state, request_context
from litestar import Request, Response, post

from hypnos_gliner.jobs import check_job


class EntitiesRequest(msgspec.Struct, kw_only=True):
    """The body of POST /v1/entities; unknown fields are ignored."""

    model: str
    input: str | list[str]
    labels: list[str]
    threshold: float = 0.5
    flat: bool | None = None


def entity_input(body: EntitiesRequest, max_chars: int) -> EntityInput:
    """The engine's job, or a 400 naming what is wrong with the request."""
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    job = EntityInput(texts=texts, labels=list(body.labels), threshold=body.threshold, flat=body.flat)
    check_job(job)
    chars = sum(len(text) for text in texts)
    if chars > max_chars:
        raise invalid_request(f"The input holds {chars} characters, above limits.max_prompt_chars ({max_chars})")
    return job


@post("/v1/entities", guards=[ready_guard], status_code=200)
async def entities(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Zero-shot entities of one text or an array of texts, in input order (Hypnos extension)."""
    state = hypnos_state(request)
    context = request_context(request)
    body = await decode_json(request, EntitiesRequest)
    context.record.model = body.model
    job = entity_input(body, state.settings.limits.max_prompt_chars)
    state.scheduler.serving(body.model, Modality.ENTITY_EXTRACTION)
    async with lease_for(request, body.model, Modality.ENTITY_EXTRACTION) as lease:
        note_lease(context, lease)
        started = time.perf_counter()
        result = await call_engine(state, lease, lambda: lease.engine.extract_entities(job, lease.cancel))
        inference_ms = (time.perf_counter() - started) * 1000
        telemetry = lease.telemetry(result.timing, inference_ms)
        headers = wait_headers(lease)
    context.record.inference_ms = round(inference_ms, 3)
    context.record.telemetry, context.record.input_text = telemetry, "\n".join(job.texts)  # observability
    data = [{"object": "entities", "index": index, "entities": found} for index, found in enumerate(result.entities)]
    answer = {
        "object": "list",
        "model": body.model,
        "data": data,
        "usage": {"texts": len(job.texts), "characters": sum(len(text) for text in job.texts)},
        "hypnos_telemetry": telemetry,
    }
    return json_response(answer, headers=headers)


ROUTES = [entities]
