"""POST /v1/embeddings (section 8)."""

from __future__ import annotations

import time
from typing import Any

from hypnos.errors import invalid_request
from hypnos.openai import EmbeddingsRequest
from hypnos.types import Modality
from litestar import Request, Response, post

from hypnos_server.routes.inference import (
    call_engine,
    decode_json,
    json_response,
    lease_for,
    note_lease,
    ready_guard,
    wait_headers,
)
from hypnos_server.routes.vector_encoding import check_encoding_format, encode_vector
from hypnos_server.state import hypnos_state, request_context


@post("/v1/embeddings", guards=[ready_guard], status_code=200)
async def embeddings(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Embed one string or an array of strings; vectors in input order as float arrays."""
    state = hypnos_state(request)
    context = request_context(request)
    body = await decode_json(request, EmbeddingsRequest)
    context.record.model = body.model
    encoding_format = check_encoding_format(body.encoding_format)
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    if not texts:
        raise invalid_request("`input` must be a string or a non-empty array of strings")
    chars = sum(len(text) for text in texts)
    if chars > state.settings.limits.max_prompt_chars:
        raise invalid_request(f"The input holds {chars} characters, above limits.max_prompt_chars")
    state.scheduler.serving(body.model, Modality.EMBEDDINGS)
    async with lease_for(request, body.model, Modality.EMBEDDINGS) as lease:
        note_lease(context, lease)
        started = time.perf_counter()
        result = await call_engine(state, lease, lambda: lease.engine.embed(texts, lease.cancel))
        inference_ms = (time.perf_counter() - started) * 1000
        telemetry = lease.telemetry(result.timing, inference_ms)
        headers = wait_headers(lease)
    context.record.tokens_in = result.prompt_tokens
    context.record.inference_ms = round(inference_ms, 3)
    context.record.telemetry, context.record.input_text = telemetry, "\n".join(texts)  # observability
    data = [
        {"object": "embedding", "index": i, "embedding": encode_vector(vector, encoding_format)}
        for i, vector in enumerate(result.vectors)
    ]
    answer = {
        "object": "list",
        "model": body.model,
        "data": data,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
        "hypnos_telemetry": telemetry,
    }
    return json_response(answer, headers=headers)


ROUTES = [embeddings]
