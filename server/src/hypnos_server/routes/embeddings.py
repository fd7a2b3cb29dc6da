"""POST /v1/embeddings (section 8)."""

from __future__ import annotations

import math
from typing import Any

from hypnos.engine import EmbeddingInput
from hypnos.errors import invalid_request
from hypnos.openai import EmbeddingsRequest
from hypnos.types import Modality
from litestar import Request, Response, post

from hypnos_server.routes.inference import InferenceRun, decode_json, json_response, ready_guard
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
    texts = embedding_inputs(body.input)
    chars = sum(len(text) for text in texts)
    if chars > state.settings.limits.max_prompt_chars:
        raise invalid_request(f"The input holds {chars} characters or tokens, above limits.max_prompt_chars")
    if body.dimensions is not None and body.dimensions < 1:
        raise invalid_request("Invalid value for `dimensions`: expected an integer >= 1")
    async with InferenceRun(request, body.model, [Modality.EMBEDDINGS]) as run:
        if body.dimensions is not None and not run.engine.capabilities().matryoshka:
            raise invalid_request(f"The model `{body.model}` was not trained for shorter vectors; send no `dimensions`")
        result = await run.call(lambda engine: engine.embed(texts, run.lease.cancel))
        telemetry = run.telemetry(result.timing)
        headers = run.headers()
    context.record.tokens_in = result.prompt_tokens
    context.record.input_text = "\n".join(t if isinstance(t, str) else f"<{len(t)} token ids>" for t in texts)
    vectors = result.vectors if body.dimensions is None else [shortened(v, body.dimensions) for v in result.vectors]
    data = [
        {"object": "embedding", "index": i, "embedding": encode_vector(vector, encoding_format)}
        for i, vector in enumerate(vectors)
    ]
    answer = {
        "object": "list",
        "model": body.model,
        "data": data,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
        "hypnos_telemetry": telemetry,
    }
    return json_response(answer, headers=headers)


def embedding_inputs(wire: str | list[Any]) -> list[EmbeddingInput]:
    """The inputs as engines take them: one string, strings, one token-id array, or token-id arrays (not mixed)."""
    if isinstance(wire, str):
        return [wire]
    if wire and all(isinstance(item, int) for item in wire):
        return [list(wire)]
    if wire and (all(isinstance(item, str) for item in wire) or all(isinstance(item, list) and item for item in wire)):
        return list(wire)
    raise invalid_request(
        "`input` must be a string, a non-empty array of strings, an array of token ids or an array of non-empty "
        "token-id arrays"
    )


def shortened(vector: list[float], dimensions: int) -> list[float]:
    """The first `dimensions` values renormalized to unit length (Matryoshka); 400 above the model's size."""
    if dimensions > len(vector):
        raise invalid_request(f"Invalid value for `dimensions`: the model's vectors have {len(vector)}")
    head = vector[:dimensions]
    norm = math.sqrt(sum(value * value for value in head)) or 1.0
    return [value / norm for value in head]


ROUTES = [embeddings]
