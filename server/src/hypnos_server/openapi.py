"""The served OpenAPI schema (GET /schema/openapi.json): Litestar's paths, completed with bodies, errors and auth.

The handlers read their bodies themselves (msgspec, so that bad input maps to the spec's errors), so Litestar sees
no request types; ROUTE_DOCS names each route's body Struct, form, answers and errors, and `complete` writes them
into the generated document. A plugin's route may carry the same `RouteDoc` in its handler's `opt["openapi"]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from hypnos.errors import not_found
from hypnos.openai import (
    ChatCompletionRequest,
    EmbeddingsRequest,
    ImageGenerationRequest,
    SpeechRequest,
    TranscriptionJsonRequest,
)
from hypnos.types import ErrorBody, MoeOffload
from litestar import Request, Response, Router
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.routes import HTTPRoute

from hypnos_server.advisor import AdvisorRequest
from hypnos_server.batches.routes import CreateBatch
from hypnos_server.errors import render
from hypnos_server.observability.request_log import LEVELS
from hypnos_server.observability.routes import LevelBody
from hypnos_server.routes.audio import WAV_FALLBACK_FORMATS
from hypnos_server.routes.chat_input import ROLES, THINKING_BUDGETS
from hypnos_server.routes.conversations import ConversationCreate, ConversationUpdate, ItemsCreate
from hypnos_server.routes.memory import KvParkRequest, TierRequest
from hypnos_server.routes.messages_input import MessagesRequest
from hypnos_server.routes.models import MoeOffloadRequest
from hypnos_server.routes.pool import PoolChangeRequest
from hypnos_server.routes.rerank import RerankRequest
from hypnos_server.routes.responses_compaction import CompactRequest
from hypnos_server.routes.responses_input import ResponsesRequest

JSON = "application/json"
SCHEMAS = "#/components/schemas/{name}"
OBJECT: dict[str, Any] = {"type": "object"}
BINARY: dict[str, Any] = {"type": "string", "format": "binary"}
TEXT: dict[str, Any] = {"type": "string"}
RESPONSES_SSE = "`event: response.*` / `data: <event JSON>` events ending with response.completed (or .failed)"
MESSAGES_SSE = "Anthropic's events: message_start, content_block_*, message_delta, message_stop (errors: `error`)"
SSE_NOTE = "`data: <chunk JSON>` events, then `data: [DONE]`; a failure after the headers: finish_reason `error`"

# the status line of each error the spec documents (section 4), for the responses' descriptions
ERRORS: dict[int, str] = {
    400: "invalid_request_error: malformed body, bad field value, a limit exceeded, modality mismatch",
    401: "invalid_api_key: missing, malformed or unknown key (only when the server has keys)",
    403: "permission_denied: the key is not an admin key",
    404: "model_not_found, model_disabled or not_found",
    408: "request_timeout_secs elapsed before the response headers (plain text)",
    413: "the body is above limits.max_body_bytes (plain text, JSON on multipart routes)",
    422: "invalid_request_error: an unknown mode",
    429: "model_busy (queue full or model leased), or rate_limit_error (a per-key limit, with Retry-After)",
    499: "cancelled: the client went away or the server is shutting down",
    500: "server_error: the engine failed",
    503: "model_not_available (still staging, with Retry-After) or deadline_unmeetable",
    504: "timeout: an engine-side timeout",
    507: "insufficient_vram_or_ram, process_memory_cap or device_out_of_memory",
}
PLAIN_TEXT_ERRORS = {408, 413}
REQUEST_ID = {"x-request-id": {"$ref": "#/components/headers/RequestId"}}
BEARER = {"type": "http", "scheme": "bearer", "description": "Needed on /v1/* when the server has API keys"}
INFERENCE_ERRORS = (400, 404, 413, 429, 499, 500, 503, 504, 507)
PLACEMENT_ERRORS = (400, 403, 404, 413, 429, 503, 507)
REQUEST_HEADERS: list[dict[str, Any]] = [
    {"name": "x-hypnos-deadline-ms", "in": "header", "required": False, "schema": {"type": "integer", "minimum": 0},
     "description": "The longest the request may wait before it starts; 503 deadline_unmeetable when it cannot"},
    {"name": "x-hypnos-next-model", "in": "header", "required": False, "schema": TEXT,
     "description": "The model the client calls next, loaded in the background"},
    {"name": "x-hypnos-workflow", "in": "header", "required": False, "schema": TEXT,
     "description": "`<name>/<id>` of a multi-step task"},
    {"name": "x-hypnos-workflow-end", "in": "header", "required": False, "schema": {"enum": ["true", "false"]},
     "description": "`true` on a workflow's last request"},
]  # fmt: skip


@dataclass(frozen=True)
class RouteDoc:
    """What the schema says of one operation beyond Litestar's own: body, form, answers, query and errors."""

    body: type | None = None
    form: dict[str, Any] | None = None
    answers: dict[str, dict[str, Any]] = field(default_factory=lambda: {JSON: OBJECT})
    errors: tuple[int, ...] = ()
    query: dict[str, dict[str, Any]] = field(default_factory=dict)
    inference: bool = False
    status: int = 200


def _obj(*required: str, **properties: Any) -> dict[str, Any]:
    """An object schema with these required keys (more keys may appear: responses are additive)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def _sse(description: str) -> dict[str, Any]:
    """A text/event-stream answer: each server-sent event (its `event` name and its `data`) as it is read."""
    return {**_obj("data", event=TEXT, data=TEXT), "description": description}


TELEMETRY = {"type": "object", "description": "hypnos_telemetry, section 5"}
MODEL_PLACEMENT = _obj("model", "placement", model=TEXT, placement=OBJECT)
TRANSCRIPTION_FORM = _obj(
    "model",
    "file",
    model=TEXT,
    file=BINARY,
    language=TEXT,
    prompt=TEXT,
    response_format=TEXT,
)
EDIT_FORM = _obj(
    "model",
    "prompt",
    "image",
    model=TEXT,
    prompt=TEXT,
    image={"oneOf": [BINARY, {"type": "array", "items": BINARY}]},
    negative_prompt=TEXT,
    n={"type": "integer"},
    size=TEXT,
    steps={"type": "integer"},
    seed={"type": "integer"},
    cfg_scale={"type": "number"},
)
RESPONSE = _obj("id", "object", "status", "output", output={"type": "array"}, usage=OBJECT, hypnos_telemetry=TELEMETRY)
CONVERSATION = _obj("id", "object", "created_at", "metadata")
ITEM_LIST = _obj("object", "data", "has_more", data={"type": "array"})
PAGE_QUERY: dict[str, dict[str, Any]] = {
    "limit": {"type": "integer", "minimum": 1},
    "order": {"enum": ["asc", "desc"]},
    "after": TEXT,
}
ANTHROPIC_MESSAGE = _obj("id", "type", "role", "content", "stop_reason", "usage", content={"type": "array"})
KV_PARK = _obj("enabled", "max_bytes", "used_bytes", "models", enabled={"type": "boolean"}, models={"type": "array"})
IMAGES = _obj("created", "data", data={"type": "array", "items": _obj("b64_json", b64_json=TEXT)})
LOG_LEVEL = _obj("level", level={"enum": list(LEVELS)})
FILE = _obj("id", "object", "bytes", "created_at", "filename", "purpose")
FILE_FORM = _obj("file", "purpose", file=BINARY, purpose={"enum": ["batch"]})
BATCH = _obj("id", "object", "endpoint", "input_file_id", "status", "request_counts", request_counts=OBJECT)
# the closed vocabularies the handlers check although the Structs type them as plain strings
FIELD_ENUMS: dict[tuple[str, str], list[str]] = {
    ("ChatMessage", "role"): sorted(ROLES),
    ("ContentPart", "type"): ["text", "image_url", "input_audio"],
    ("ChatCompletionRequest", "reasoning_effort"): ["none", *THINKING_BUDGETS],
    ("SpeechRequest", "response_format"): ["pcm", *sorted(WAV_FALLBACK_FORMATS)],
    ("MoeOffloadRequest", "mode"): [str(mode) for mode in MoeOffload],
    ("LevelBody", "level"): list(LEVELS),
}
POOL_CHANGE = {JSON: _obj("model", "action", "persisted", action={"enum": ["added", "replaced", "removed"]})}
LOG_QUERY: dict[str, dict[str, Any]] = {
    "model": TEXT,
    "route": TEXT,
    "status": {"enum": ["ok", "error", "4xx", "5xx"]},
    "key": TEXT,
    "limit": {"type": "integer", "minimum": 1},
}

ROUTE_DOCS: dict[tuple[str, str], RouteDoc] = {
    ("GET", "/health"): RouteDoc(answers={JSON: _obj("status", "service", "version", "uptime_secs")}),
    ("GET", "/ready"): RouteDoc(answers={JSON: _obj("ready", ready={"type": "boolean"})}, errors=(503,)),
    ("GET", "/metrics"): RouteDoc(answers={"text/plain": TEXT}),
    ("GET", "/v1/models"): RouteDoc(answers={JSON: _obj("object", "data", data={"type": "array"})}),
    ("GET", "/v1/models/{model_id}"): RouteDoc(answers={JSON: _obj("id", "object", "owned_by")}, errors=(404,)),
    ("POST", "/v1/models"): RouteDoc(
        body=PoolChangeRequest, answers=POOL_CHANGE, errors=(400, 403, 413, 503), status=201
    ),
    ("PUT", "/v1/models/{model_id}"): RouteDoc(
        body=PoolChangeRequest, answers=POOL_CHANGE, errors=(400, 403, 404, 413, 429, 503)
    ),
    ("DELETE", "/v1/models/{model_id}"): RouteDoc(
        answers=POOL_CHANGE, errors=(400, 403, 404, 429, 503), query={"drain_secs": {"type": "number", "minimum": 0}}
    ),
    ("GET", "/v1/models/catalog"): RouteDoc(
        answers={JSON: _obj("object", "data", data={"type": "array"})}, errors=(404,), query={"modality": TEXT}
    ),
    ("POST", "/v1/advisor"): RouteDoc(
        body=AdvisorRequest, answers={JSON: _obj("config", config=TEXT)}, errors=(400, 404, 413)
    ),
    ("POST", "/v1/models/{model_id}/enable"): RouteDoc(
        answers={JSON: _obj("model", "enabled")}, errors=(403, 404, 503)
    ),
    ("POST", "/v1/models/{model_id}/disable"): RouteDoc(
        answers={JSON: _obj("model", "enabled")}, errors=(403, 404, 429, 503)
    ),
    ("POST", "/v1/models/{model_id}/moe-offload"): RouteDoc(
        body=MoeOffloadRequest,
        answers={JSON: _obj("model", "moe_offload", "applies")},
        errors=(400, 403, 404, 413, 422, 503),
    ),
    ("GET", "/v1/memory/status"): RouteDoc(answers={JSON: _obj("capabilities", "models")}),
    ("POST", "/v1/memory/tier"): RouteDoc(body=TierRequest, answers={JSON: MODEL_PLACEMENT}, errors=PLACEMENT_ERRORS),
    ("GET", "/v1/memory/kv-park"): RouteDoc(answers={JSON: KV_PARK}),
    ("POST", "/v1/memory/kv-park"): RouteDoc(body=KvParkRequest, answers={JSON: KV_PARK}, errors=(400, 403, 413)),
    ("POST", "/v1/chat/completions"): RouteDoc(
        body=ChatCompletionRequest,
        answers={
            JSON: _obj("id", "object", "choices", "usage", choices={"type": "array"}, hypnos_telemetry=TELEMETRY),
            "text/event-stream": _sse(SSE_NOTE),
        },
        errors=INFERENCE_ERRORS,
        inference=True,
    ),
    ("POST", "/v1/embeddings"): RouteDoc(
        body=EmbeddingsRequest,
        answers={JSON: _obj("object", "data", "usage", data={"type": "array"})},
        errors=INFERENCE_ERRORS,
        inference=True,
    ),
    ("POST", "/v1/rerank"): RouteDoc(
        body=RerankRequest,
        answers={JSON: _obj("model", "results", "usage", results={"type": "array"}, hypnos_telemetry=TELEMETRY)},
        errors=INFERENCE_ERRORS,
        inference=True,
    ),
    ("POST", "/v2/rerank"): RouteDoc(
        body=RerankRequest,
        answers={JSON: _obj("id", "results", "meta", results={"type": "array"}, hypnos_telemetry=TELEMETRY)},
        errors=INFERENCE_ERRORS,
        inference=True,
    ),
    ("POST", "/v1/audio/transcriptions"): RouteDoc(
        body=TranscriptionJsonRequest,
        form=TRANSCRIPTION_FORM,
        answers={JSON: _obj("text", text=TEXT)},
        errors=INFERENCE_ERRORS,
        inference=True,
    ),
    ("POST", "/v1/audio/speech"): RouteDoc(
        body=SpeechRequest,
        answers={"audio/wav": BINARY, "audio/pcm": BINARY},
        errors=INFERENCE_ERRORS,
        inference=True,
    ),
    ("POST", "/v1/images/generations"): RouteDoc(
        body=ImageGenerationRequest, answers={JSON: IMAGES}, errors=INFERENCE_ERRORS, inference=True
    ),
    ("POST", "/v1/images/edits"): RouteDoc(
        form=EDIT_FORM, answers={JSON: IMAGES}, errors=INFERENCE_ERRORS, inference=True
    ),
    ("POST", "/v1/responses"): RouteDoc(
        body=ResponsesRequest,
        answers={JSON: RESPONSE, "text/event-stream": _sse(RESPONSES_SSE)},
        errors=INFERENCE_ERRORS,
        inference=True,
    ),
    ("POST", "/v1/responses/compact"): RouteDoc(
        body=CompactRequest,
        answers={JSON: _obj("id", "object", "output", "created_at", "usage", output={"type": "array"})},
        errors=INFERENCE_ERRORS,
        inference=True,
    ),
    ("GET", "/v1/responses/{response_id}"): RouteDoc(answers={JSON: RESPONSE}, errors=(404,)),
    ("DELETE", "/v1/responses/{response_id}"): RouteDoc(answers={JSON: _obj("id", "deleted")}, errors=(404,)),
    ("POST", "/v1/responses/{response_id}/cancel"): RouteDoc(answers={JSON: RESPONSE}, errors=(400, 404)),
    ("GET", "/v1/responses/{response_id}/input_items"): RouteDoc(
        answers={JSON: ITEM_LIST}, errors=(400, 404), query=PAGE_QUERY
    ),
    ("POST", "/v1/conversations"): RouteDoc(body=ConversationCreate, answers={JSON: CONVERSATION}, errors=(400,)),
    ("GET", "/v1/conversations/{conversation_id}"): RouteDoc(answers={JSON: CONVERSATION}, errors=(404,)),
    ("POST", "/v1/conversations/{conversation_id}"): RouteDoc(
        body=ConversationUpdate, answers={JSON: CONVERSATION}, errors=(400, 404)
    ),
    ("DELETE", "/v1/conversations/{conversation_id}"): RouteDoc(
        answers={JSON: _obj("id", "object", "deleted")}, errors=(404,)
    ),
    ("GET", "/v1/conversations/{conversation_id}/items"): RouteDoc(
        answers={JSON: ITEM_LIST}, errors=(400, 404), query=PAGE_QUERY
    ),
    ("POST", "/v1/conversations/{conversation_id}/items"): RouteDoc(
        body=ItemsCreate, answers={JSON: ITEM_LIST}, errors=(400, 404)
    ),
    ("GET", "/v1/conversations/{conversation_id}/items/{item_id}"): RouteDoc(
        answers={JSON: _obj("id", "type")}, errors=(404,)
    ),
    ("DELETE", "/v1/conversations/{conversation_id}/items/{item_id}"): RouteDoc(
        answers={JSON: CONVERSATION}, errors=(404,)
    ),
    ("POST", "/v1/messages"): RouteDoc(
        body=MessagesRequest,
        answers={JSON: ANTHROPIC_MESSAGE, "text/event-stream": _sse(MESSAGES_SSE)},
        errors=INFERENCE_ERRORS,
        inference=True,
    ),
    ("POST", "/v1/messages/count_tokens"): RouteDoc(
        body=MessagesRequest, answers={JSON: _obj("input_tokens")}, errors=INFERENCE_ERRORS, inference=True
    ),
    ("GET", "/v1/logs"): RouteDoc(answers={JSON: _obj("level", "records")}, errors=(400,), query=LOG_QUERY),
    ("GET", "/v1/logs/{id}"): RouteDoc(answers={JSON: _obj("id", "route", "status")}, errors=(404,)),
    ("DELETE", "/v1/logs"): RouteDoc(answers={JSON: _obj("cleared")}, errors=(403,)),
    ("POST", "/v1/logs/level"): RouteDoc(body=LevelBody, answers={JSON: LOG_LEVEL}, errors=(400, 403, 413)),
    ("POST", "/v1/files"): RouteDoc(form=FILE_FORM, answers={JSON: FILE}, errors=(400, 413)),
    ("GET", "/v1/files"): RouteDoc(answers={JSON: ITEM_LIST}, errors=(400,), query={**PAGE_QUERY, "purpose": TEXT}),
    ("GET", "/v1/files/{file_id}"): RouteDoc(answers={JSON: FILE}, errors=(404,)),
    ("GET", "/v1/files/{file_id}/content"): RouteDoc(answers={"application/octet-stream": BINARY}, errors=(404,)),
    ("DELETE", "/v1/files/{file_id}"): RouteDoc(answers={JSON: _obj("id", "object", "deleted")}, errors=(404,)),
    ("POST", "/v1/batches"): RouteDoc(body=CreateBatch, answers={JSON: BATCH}, errors=(400, 404, 413)),
    ("GET", "/v1/batches"): RouteDoc(answers={JSON: ITEM_LIST}, errors=(400,), query=PAGE_QUERY),
    ("GET", "/v1/batches/{batch_id}"): RouteDoc(answers={JSON: BATCH}, errors=(404,)),
    ("POST", "/v1/batches/{batch_id}/cancel"): RouteDoc(answers={JSON: BATCH}, errors=(404,)),
}
ROUTE_DOCS[("POST", "/rerank")] = ROUTE_DOCS[("POST", "/v1/rerank")]  # the path vLLM and llama.cpp serve it at too


def _error_response(status: int, multipart: bool) -> dict[str, Any]:
    plain = status in PLAIN_TEXT_ERRORS and not (status == 413 and multipart)
    error_body = {"schema": {"$ref": SCHEMAS.format(name="ErrorBody")}}
    content = {"text/plain": {"schema": TEXT}} if plain else {JSON: error_body}
    return {"description": ERRORS[status], "headers": REQUEST_ID, "content": content}


def _operation(operation: dict[str, Any], doc: RouteDoc, protected: bool, components: dict[str, Any]) -> None:
    """Write one operation's body, parameters, answers, errors and security."""
    content: dict[str, Any] = {}
    if doc.body is not None:
        (ref,), found = msgspec.json.schema_components([doc.body], ref_template=SCHEMAS)
        components.update(found)
        content[JSON] = {"schema": ref}
    if doc.form is not None:
        content["multipart/form-data"] = {"schema": doc.form}
    if content:
        operation["requestBody"] = {"required": True, "content": content}
    parameters = [p for p in operation.get("parameters", []) if p.get("in") == "path"]
    parameters += [{"name": n, "in": "query", "required": False, "schema": s} for n, s in doc.query.items()]
    parameters += REQUEST_HEADERS if doc.inference else []
    if parameters:
        operation["parameters"] = parameters
    ok = {"description": "OK", "headers": REQUEST_ID, "content": {m: {"schema": s} for m, s in doc.answers.items()}}
    statuses = {*doc.errors, 408, *((401, 429) if protected else ()), *((413,) if content else ())}
    multipart = doc.form is not None
    operation["responses"] = {str(doc.status): ok, **{str(s): _error_response(s, multipart) for s in sorted(statuses)}}
    if protected:
        operation["security"] = [{"bearer": []}]
    else:
        operation["security"] = []


def route_doc(method: str, path: str, handler: Any) -> RouteDoc | None:
    """The doc of one operation: the server's table, else the handler's `opt["openapi"]` (plugin routes)."""
    doc = ROUTE_DOCS.get((method, path))
    if doc is None:
        doc = (getattr(handler, "opt", None) or {}).get("openapi")
    return doc if isinstance(doc, RouteDoc) else None


def complete(schema: dict[str, Any], routes: list[Any]) -> dict[str, Any]:
    """Litestar's generated document with every documented operation completed, the error body and the auth scheme."""
    document = msgspec.json.decode(msgspec.json.encode(schema))
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    (_,), found = msgspec.json.schema_components([ErrorBody], ref_template=SCHEMAS)
    schemas.update(found)
    components["headers"] = {"RequestId": {"description": "req-<32 hex>, the request log's key",
                                           "schema": {"type": "string", "pattern": "^req-[0-9a-f]{32}$"}}}  # fmt: skip
    components["securitySchemes"] = {"bearer": BEARER}
    paths = document.get("paths", {})
    for route in routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            if not handler.resolve_include_in_schema():
                continue
            for method in handler.http_methods:
                operation = paths.get(route.path_format, {}).get(method.lower())
                doc = route_doc(method, route.path_format, handler)
                if operation is not None and doc is not None:
                    protected = route.path_format == "/v1" or route.path_format.startswith("/v1/")
                    _operation(operation, doc, protected, schemas)
    for (name, prop), values in FIELD_ENUMS.items():
        field_schema = schemas.get(name, {}).get("properties", {}).get(prop)
        if field_schema is not None:
            _restrict(field_schema, values)
    return document


def _restrict(field_schema: dict[str, Any], values: list[str]) -> None:
    """Narrow a string field (or the string branch of an optional one) to its accepted values."""
    for branch in field_schema.get("anyOf", [field_schema]):
        if branch.get("type") == "string":
            branch["enum"] = values


class SchemaJson(JsonRenderPlugin):
    """Serves the completed document at `<path>/openapi.json` (built once per app, on first request)."""

    def __init__(self) -> None:
        super().__init__()
        self._rendered: bytes | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        """The completed document as JSON."""
        if self._rendered is None:
            self._rendered = msgspec.json.encode(complete(openapi_schema, list(request.app.routes)))
        return self._rendered


def _not_found_as_json(response: Response[Any]) -> Response[Any]:
    """Litestar answers unknown /schema/* pages with HTML; give them the spec's 404 body instead."""
    if response.status_code != 404 or response.media_type == JSON:
        return response
    status, headers, body, media_type = render(not_found("No such schema document; the schema is /schema/openapi.json"))
    return Response(content=body, status_code=status, headers=headers, media_type=media_type)


def openapi_config(version: str) -> OpenAPIConfig:
    """Litestar's OpenAPI at its default path: the JSON at /schema/openapi.json (and /schema), no UI pages."""
    router = Router("/schema", route_handlers=[], include_in_schema=False, after_request=_not_found_as_json)
    return OpenAPIConfig(
        openapi_router=router,
        title="Hypnos",
        version=version,
        description="Local multi-modal AI server; OpenAI-compatible routes plus the Hypnos extensions.",
        use_handler_docstrings=True,
        render_plugins=[SchemaJson()],
    )
