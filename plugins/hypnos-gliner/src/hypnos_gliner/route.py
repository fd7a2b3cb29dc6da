"""POST /v1/entities (spec section 13), through the server's request pipeline: auth, key limits, lease, telemetry.

Imported only by the `hypnos_routes` hook, which only the server calls: the route goes through the server's plugin
API (`hypnos_server.plugin_api`: decoding, staging guard, the one inference runner) like every built-in route.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.engine import EntityInput
from hypnos.errors import invalid_request
from hypnos.kit.entities import check_entity_job
from hypnos.types import Modality
from hypnos_server.plugin_api import (
    InferenceRun,
    decode_json,
    hypnos_state,
    json_response,
    ready_guard,
    request_context,
)
from litestar import Request, Response, post


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
    check_entity_job(job)
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
    async with InferenceRun(request, body.model, [Modality.ENTITY_EXTRACTION]) as run:
        result = await run.call(lambda engine: engine.extract_entities(job, run.lease.cancel))
        telemetry = run.telemetry(result.timing)
        headers = run.headers()
    context.record.input_text = "\n".join(job.texts)  # observability
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
