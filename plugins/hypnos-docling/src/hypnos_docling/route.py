"""POST /v1/documents/convert and the picture routes (spec section 12), through the server's request pipeline.

Imported only by the `hypnos_routes` hook, which only the server calls: the routes use the server's own helpers
(decoding, staging guard, lease, error mapping), so auth, key limits and telemetry apply as on every /v1 route.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from hypnos.errors import HypnosError, invalid_request
from hypnos.types import EngineTiming, Modality
from hypnos_server.plugin_api import (
    InferenceRun,
    Lease,
    RequestContext,
    check_serving,
    engine_table,
    hypnos_state,
    json_response,
    model_leases,
    ready_guard,
    request_context,
)
from litestar import Request, Response, delete, get, post
from litestar.response import Stream

from hypnos_docling.describe import describe, insert_descriptions
from hypnos_docling.events import DocumentStarted, PageDone
from hypnos_docling.formats import detect_format
from hypnos_docling.markdown import join_pages
from hypnos_docling.options import DoclingOptions
from hypnos_docling.pictures import STORE_KEY, PictureStore, StoredDocument, iso, picture_record
from hypnos_docling.request import ConvertRequest, convert_request

DONE = b"data: [DONE]\n\n"


def picture_store(request: Request[Any, Any, Any]) -> PictureStore:
    """The app's picture store, made on first use with the operator's TTL."""
    state = request.app.state
    store = state.get(STORE_KEY)
    if store is None:
        store = PictureStore(hypnos_state(request).settings.server.document_pictures_ttl_secs)
        state[STORE_KEY] = store
    return store


def caller(request: Request[Any, Any, Any]) -> str | None:
    """The label of the key that calls (the owner of the pictures it stores); None when the server has no keys."""
    key = request_context(request).key
    return key.label if key is not None else None


class Conversion:
    """One request's conversion: page objects, stored pictures, descriptions and usage, event by event."""

    def __init__(self, request: Request[Any, Any, Any], body: ConvertRequest, prompt: str) -> None:
        self.body = body
        self.leases = model_leases(request)
        self.prompt = prompt
        self.store = picture_store(request) if body.return_pictures else None
        self.stored: StoredDocument | None = self.store.open(caller(request)) if self.store is not None else None
        self.started: DocumentStarted | None = None
        self.pages: list[dict[str, Any]] = []
        self.usage = {"pages": 0, "pictures": 0, "tables": 0, "pictures_described": 0}
        self.ms = 0.0

    def started_event(self, event: DocumentStarted) -> dict[str, Any]:
        """The document.started object."""
        self.started = event
        answer: dict[str, Any] = {"object": "document.started", "page_count": event.page_count, "pages": event.pages}
        if self.stored is not None:
            answer["id"] = self.stored.id
        return answer

    async def page(self, event: PageDone) -> dict[str, Any]:
        """The page object of one converted page (pictures stored and described first)."""
        markdown = event.markdown
        if self.body.describe_pictures:
            descriptions = []
            for picture in event.pictures:
                text = await describe(self.leases, self.body.describe_pictures, self.prompt, picture)
                descriptions.append(text if picture.png else None)
                self.usage["pictures_described"] += bool(text)
            markdown = insert_descriptions(markdown, descriptions)
        page: dict[str, Any] = {"page": event.page, "markdown": markdown}
        if event.json is not None:
            page["json"] = event.json
        page.update(pictures=len(event.pictures), tables=event.tables, ms=event.ms)
        if self.stored is not None and self.store is not None:
            indexes = self.store.add(self.stored, event.pictures)
            page["picture_urls"] = [f"/v1/documents/{self.stored.id}/pictures/{n}" for n in indexes]
        self.usage["pages"] += 1
        self.usage["pictures"] += len(event.pictures)
        self.usage["tables"] += event.tables
        self.ms += event.ms
        self.pages.append(page)
        return page

    def document(self, lease: Lease, inference_ms: float, with_pages: bool) -> dict[str, Any]:
        """The final document object (pages left out when they already went out as events)."""
        pages = self.usage["pages"]
        timing = EngineTiming(pages=pages, ms_per_page=round(self.ms / pages, 3) if pages else None)
        answer: dict[str, Any] = {"object": "document"}
        if self.stored is not None:
            answer.update(id=self.stored.id, pictures_expire_at=iso(self.stored.expires_at))
        answer.update(
            model=self.body.model,
            filename=self.body.job.filename,
            page_count=self.started.page_count if self.started else 0,
            pages=self.pages if with_pages else [],
            markdown=join_pages([page["markdown"] for page in self.pages]),
            usage=self.usage,
            hypnos_telemetry=lease.telemetry(timing, inference_ms),
        )
        return answer


def _sse(obj: Any) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


async def _first(events: AsyncIterator[Any]) -> DocumentStarted:
    event = await events.__anext__()
    if not isinstance(event, DocumentStarted):
        raise HypnosError(500, "server_error", "the document engine did not start the document")
    return event


async def _stream(
    context: RequestContext, conversion: Conversion, events: AsyncIterator[Any], first: DocumentStarted, lease: Lease
) -> AsyncIterator[bytes]:
    started = time.perf_counter()
    yield _sse(conversion.started_event(first))
    try:
        async for event in events:
            yield _sse({"object": "document.page", **await conversion.page(event)})
    except Exception as error:
        failure = error if isinstance(error, HypnosError) else None
        message = failure.message if failure else f"The model `{lease.model_id}` failed: {type(error).__name__}"
        kind = failure.type if failure else "server_error"
        if not context.record.error:  # a hang-up already recorded why the stream ended
            context.record.error, context.record.error_type = message, kind
        yield _sse({"object": "error", "error": {"message": message, "type": kind}})
        yield DONE
        return
    answer = conversion.document(lease, (time.perf_counter() - started) * 1000, with_pages=False)
    context.record.telemetry = answer["hypnos_telemetry"]
    yield _sse(answer)
    yield DONE


@post("/v1/documents/convert", guards=[ready_guard], status_code=200)
async def convert(request: Request[Any, Any, Any]) -> Response[Any]:
    """Convert a document to markdown (or docling JSON), whole or one SSE event per page (Hypnos extension)."""
    state = hypnos_state(request)
    context = request_context(request)
    body = await convert_request(request, state.settings.limits)
    context.record.model, context.record.stream = body.model, body.stream
    check_serving(request, body.model, Modality.DOCUMENT_CONVERSION)
    table = engine_table(request, body.model, "docling")
    options = msgspec.convert(table, DoclingOptions)
    prompt = options.describe_prompt
    body.describe_pictures = body.describe_pictures or options.describe_model
    if body.describe_pictures:
        check_serving(request, body.describe_pictures, Modality.VISION)
    detect_format(body.job.data, body.job.filename)  # an unknown format is refused before any model loads
    conversion = Conversion(request, body, prompt)
    if body.stream:
        run = InferenceRun(request, body.model, [Modality.DOCUMENT_CONVERSION])
        lease = await run.open(stream=("convert_document", body.job))  # a Ray node converts with the lease
        events = lease.engine.convert_document(body.job, lease.cancel)
        first = await run.call(lambda _engine: _first(events))
        chunks = run.stream(lambda leased: _stream(context, conversion, events, first, leased))
        return Stream(chunks, media_type="text/event-stream", headers=run.headers())
    async with InferenceRun(request, body.model, [Modality.DOCUMENT_CONVERSION]) as run:

        async def convert_all(engine: Any) -> None:
            events = engine.convert_document(body.job, run.lease.cancel)
            conversion.started_event(await _first(events))
            async for event in events:
                await conversion.page(event)

        await run.call(convert_all)
        answer = conversion.document(run.lease, run.inference_ms, with_pages=True)
        headers = run.headers()
    context.record.telemetry = answer["hypnos_telemetry"]
    return json_response(answer, headers=headers)


@get("/v1/documents/{document_id:str}/pictures", status_code=200)
async def list_pictures(request: Request[Any, Any, Any], document_id: str) -> Response[bytes]:
    """The stored pictures of a converted document (records without images); open during staging; 404 for a
    document another key converted."""
    document = picture_store(request).get(document_id, caller(request))
    data = [picture_record(document, index, False) for index in range(1, len(document.pictures) + 1)]
    answer = {"object": "list", "document_id": document.id, "expires_at": iso(document.expires_at), "data": data}
    return json_response(answer)


@get("/v1/documents/{document_id:str}/pictures/{index:str}", status_code=200)
async def get_picture(request: Request[Any, Any, Any], document_id: str, index: str) -> Response[bytes]:
    """One stored picture: its record with the image (base64), or with ?format=image the PNG bytes."""
    store = picture_store(request)
    if not index.isdigit():
        raise HypnosError(404, "not_found", f"Document `{document_id}` has no picture {index}")
    owner = caller(request)
    picture = store.picture(document_id, int(index), owner)
    fmt = request.query_params.get("format")
    if fmt == "image":
        headers = {"Cache-Control": "private, no-store"}
        return Response(content=picture.png or b"", media_type="image/png", headers=headers)
    if fmt not in (None, "json"):
        raise invalid_request(f"Invalid value for `format`: `{fmt}` (image or json)")
    return json_response(picture_record(store.get(document_id, owner), int(index), True))


@delete("/v1/documents/{document_id:str}", status_code=200)
async def delete_document(request: Request[Any, Any, Any], document_id: str) -> Response[bytes]:
    """Release a document's stored pictures."""
    picture_store(request).delete(document_id, caller(request))
    return json_response({"object": "document.deleted", "id": document_id, "deleted": True})


ROUTES = [convert, list_pictures, get_picture, delete_document]
