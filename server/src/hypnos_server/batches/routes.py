"""The Files API (/v1/files) and the Batches API (/v1/batches) in OpenAI's shapes, per API key."""

from __future__ import annotations

import time
from typing import Any

import anyio
import msgspec
from hypnos.errors import clip, invalid_request, not_found
from litestar import Request, Response, delete, get, post
from litestar.datastructures import UploadFile
from litestar.response import File

from hypnos_server.batches.lines import ENDPOINTS, window_secs
from hypnos_server.batches.service import BatchService
from hypnos_server.batches.store import BatchRecord, new_batch_id
from hypnos_server.routes.inference import decode_json, json_response, read_form
from hypnos_server.routes.responses import owner_of
from hypnos_server.routes.responses_stored import item_page
from hypnos_server.state import hypnos_state, request_context

UPLOAD_PURPOSES = ("batch",)


class CreateBatch(msgspec.Struct, kw_only=True):
    """POST /v1/batches body (unknown fields, such as output_expires_after, ignored)."""

    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None


def _service(request: Request[Any, Any, Any]) -> tuple[BatchService, str]:
    return hypnos_state(request).batches, owner_of(request_context(request))


# ---- files ----------------------------------------------------------------------------------------------------------


@post("/v1/files", status_code=200)
async def create_file(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Upload a file (multipart: `file`, `purpose` "batch"); 413 past server.files_max_bytes or the key's quota."""
    service, owner = _service(request)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise invalid_request("Send the file as multipart/form-data with the parts `file` and `purpose`")
    form = await read_form(request)
    purpose, upload = form.get("purpose"), form.get("file")
    if purpose not in UPLOAD_PURPOSES:
        raise invalid_request(f"Invalid value for `purpose`: one of {', '.join(UPLOAD_PURPOSES)}")
    if not isinstance(upload, UploadFile):
        raise invalid_request("Missing required field `file` (the file part, with a filename)")
    data = await upload.read()
    stored = await anyio.to_thread.run_sync(
        service.files.create, owner, clip(upload.filename or "upload.jsonl", 255), purpose, data
    )
    return json_response(stored.wire())


@get("/v1/files")
async def list_files(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The key's files, a cursor page (`limit`, `order`, `after`), `purpose` filtering."""
    service, owner = _service(request)
    purpose = request.query_params.get("purpose")
    files = await anyio.to_thread.run_sync(service.files.list, owner)
    listed = [stored.wire() for stored in files if purpose is None or stored.purpose == purpose]
    return json_response(item_page(listed, request.query_params))


@get("/v1/files/{file_id:str}")
async def retrieve_file(request: Request[Any, Any, Any]) -> Response[bytes]:
    """One of the key's files (404 for another key's)."""
    file_id = request.path_params["file_id"]
    service, owner = _service(request)
    stored = await anyio.to_thread.run_sync(service.files.get, owner, file_id)
    return json_response(stored.wire())


@get("/v1/files/{file_id:str}/content")
async def file_content(request: Request[Any, Any, Any]) -> File:
    """A file's bytes."""
    file_id = request.path_params["file_id"]
    service, owner = _service(request)
    path = await anyio.to_thread.run_sync(service.files.content_path, owner, file_id)
    return File(path=path, media_type="application/octet-stream", content_disposition_type="inline")


@delete("/v1/files/{file_id:str}", status_code=200)
async def delete_file(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Delete one of the key's files."""
    file_id = request.path_params["file_id"]
    service, owner = _service(request)
    await anyio.to_thread.run_sync(service.files.delete, owner, file_id)
    return json_response({"id": file_id, "object": "file", "deleted": True})


# ---- batches --------------------------------------------------------------------------------------------------------


@post("/v1/batches", status_code=200)
async def create_batch(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Start a batch of the input file's requests on `endpoint` within `completion_window` (such as "24h")."""
    service, owner = _service(request)
    body = await decode_json(request, CreateBatch)
    if body.endpoint not in ENDPOINTS:
        raise invalid_request(f"Invalid value for `endpoint`: one of {', '.join(ENDPOINTS)}")
    window = window_secs(body.completion_window)
    if window is None:
        raise invalid_request("Invalid value for `completion_window`: a duration such as 24h (s, m, h or d)")
    stored = await anyio.to_thread.run_sync(service.files.get, owner, body.input_file_id)
    if stored.purpose != "batch":
        raise invalid_request(f"The file `{clip(stored.id)}` has purpose {stored.purpose}; upload it as `batch`")
    now = int(time.time())
    record = BatchRecord(
        id=new_batch_id(),
        owner=owner,
        endpoint=body.endpoint,
        input_file_id=stored.id,
        completion_window=body.completion_window,
        status="validating",
        created_at=now,
        expires_at=now + window,
        metadata=body.metadata,
        created_ns=time.time_ns(),
    )
    await service.save(record)
    service.submit(record)
    return json_response(record.wire())


async def _batch(request: Request[Any, Any, Any], batch_id: str) -> tuple[BatchService, BatchRecord]:
    service, owner = _service(request)
    record = await service.get(owner, batch_id)
    if record is None:
        raise not_found(f"No batch `{clip(batch_id)}` (unknown or another key's)")
    return service, record


@get("/v1/batches")
async def list_batches(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The key's batches, newest first, a cursor page (`limit`, `after`)."""
    service, owner = _service(request)
    records = await anyio.to_thread.run_sync(service.store.list, owner)
    listed = [(service.live.get(record.id) or record).wire() for record in reversed(records)]
    return json_response(item_page(listed, request.query_params))


@get("/v1/batches/{batch_id:str}")
async def retrieve_batch(request: Request[Any, Any, Any]) -> Response[bytes]:
    """One of the key's batches as it stands."""
    batch_id = request.path_params["batch_id"]
    _, record = await _batch(request, batch_id)
    return json_response(record.wire())


@post("/v1/batches/{batch_id:str}/cancel", status_code=200)
async def cancel_batch(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Cancel a batch: `cancelling`, then `cancelled` with what it finished (an ended batch stays as it is)."""
    batch_id = request.path_params["batch_id"]
    service, record = await _batch(request, batch_id)
    await service.cancel(record)
    return json_response(record.wire())


ROUTES = [
    create_file,
    list_files,
    retrieve_file,
    file_content,
    delete_file,
    create_batch,
    list_batches,
    retrieve_batch,
    cancel_batch,
]
