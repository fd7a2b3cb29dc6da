"""POST /v1/rerank (the Cohere / Jina shape other servers serve) and POST /v2/rerank (Cohere's v2 path, where
litellm's cohere provider posts): documents scored against a query by a reranker model (an embeddings-modality model
whose engine reranks)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.engine import RerankInput
from hypnos.errors import invalid_request
from hypnos.types import Modality
from litestar import Request, Response, post

from hypnos_server.routes.inference import InferenceRun, decode_json, json_response, ready_guard
from hypnos_server.state import hypnos_state, request_context


class RerankRequest(msgspec.Struct, kw_only=True):
    """POST /v1/rerank and /v2/rerank body; a document is a string or an object with `text` (unknown fields, such as
    v2's `max_tokens_per_doc` and `rank_fields`, are ignored)."""

    model: str
    query: str
    documents: list[str | dict[str, Any]]
    top_n: int | None = None
    return_documents: bool = False


def document_texts(documents: list[str | dict[str, Any]]) -> list[str]:
    """The documents' texts; 400 for an entry that is neither a string nor an object with a string `text`."""
    texts = []
    for index, document in enumerate(documents):
        text = document if isinstance(document, str) else document.get("text")
        if not isinstance(text, str):
            raise invalid_request(f"Invalid value for `documents[{index}]`: a string or an object with `text`")
        texts.append(text)
    return texts


async def ranked(request: Request[Any, Any, Any], api_version: str) -> Response[bytes]:
    """Score the documents against the query; results best first, `top_n` of them, `meta` as Cohere's `api_version`
    answers it."""
    limits = hypnos_state(request).settings.limits
    record = request_context(request).record
    body = await decode_json(request, RerankRequest)
    record.model = body.model
    if not body.documents:
        raise invalid_request("`documents` must be a non-empty array")
    if len(body.documents) > limits.max_rerank_documents:
        raise invalid_request(
            f"`documents` holds {len(body.documents)} entries, above limits.max_rerank_documents "
            f"({limits.max_rerank_documents})"
        )
    if body.top_n is not None and body.top_n < 1:
        raise invalid_request("Invalid value for `top_n`: expected an integer >= 1")
    texts = document_texts(body.documents)
    chars = len(body.query) + sum(len(text) for text in texts)
    if chars > limits.max_prompt_chars:
        most = limits.max_prompt_chars
        raise invalid_request(
            f"The query and documents hold {chars} characters, above limits.max_prompt_chars ({most})"
        )
    job = RerankInput(query=body.query, documents=texts)
    async with InferenceRun(request, body.model, [Modality.EMBEDDINGS]) as run:
        result = await run.call(lambda engine: engine.rerank(job, run.lease.cancel))
        telemetry = run.telemetry(result.timing)
        headers = run.headers()
    record.tokens_in = result.prompt_tokens
    record.input_text = body.query
    order = sorted(range(len(texts)), key=lambda index: result.scores[index], reverse=True)[: body.top_n]
    results = []
    for index in order:
        entry: dict[str, Any] = {"index": index, "relevance_score": result.scores[index]}
        if body.return_documents:
            entry["document"] = {"text": texts[index]}
        results.append(entry)
    meta: dict[str, Any] = {"billed_units": {"search_units": 1}}
    if api_version == "2":
        meta = {
            "api_version": {"version": "2", "is_experimental": False},
            **meta,
            "tokens": {"input_tokens": result.prompt_tokens, "output_tokens": 0},
        }
    answer = {
        "id": record.id,
        "model": body.model,
        "results": results,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
        "meta": meta,
        "hypnos_telemetry": telemetry,
    }
    return json_response(answer, headers=headers)


@post(["/v1/rerank", "/rerank"], guards=[ready_guard], status_code=200)
async def rerank(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Score the documents against the query; results best first, `top_n` of them (also at `/rerank`, where vLLM
    and llama.cpp's server serve it and litellm's hosted_vllm provider posts)."""
    return await ranked(request, "1")


@post("/v2/rerank", guards=[ready_guard], status_code=200)
async def rerank_v2(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Cohere's v2 rerank: as /v1/rerank, with v2's `meta` (api_version 2, tokens); errors in Cohere's shape."""
    return await ranked(request, "2")


ROUTES = [rerank, rerank_v2]
