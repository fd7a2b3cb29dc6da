"""The body of POST /v1/documents/convert (multipart parts or JSON fields), checked into a conversion job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from hypnos.config import LimitsConfig
from hypnos.engine import DocumentInput
from hypnos.errors import invalid_request
from hypnos.media import decode_base64, decode_data_url, load_media_url
from litestar import Request
from litestar.datastructures import UploadFile

TRUE = {"true", "1", "yes", "on"}
FALSE = {"false", "0", "no", "off"}
FORMATS = {"markdown", "json"}


class ConvertJson(msgspec.Struct, kw_only=True):
    """The JSON form of the request; unknown fields are ignored."""

    model: str
    file: str | None = None
    url: str | None = None
    filename: str | None = None
    pages: str | int | None = None
    ocr: bool | str | int = True
    output_format: str = "markdown"
    stream: bool | str | int = False
    describe_pictures: str | None = None
    return_pictures: bool | str | int = False


@dataclass
class ConvertRequest:
    """The checked request: the job for the engine and the route's own options."""

    model: str
    job: DocumentInput
    stream: bool
    describe_pictures: str | None
    return_pictures: bool


def flag(value: Any, name: str) -> bool:
    """A boolean in the accepted spellings: true/false, 1/0, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise invalid_request(f"Invalid value for `{name}`: `{value}` (true/false, 1/0, yes/no, on/off)")


def page_range(value: Any) -> tuple[int, int] | None:
    """`3` or `2-5` (1-based, inclusive); None for all pages."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    first, dash, last = text.partition("-")
    try:
        start, end = int(first), int(last) if dash else int(first)
    except ValueError:
        raise invalid_request(f"Invalid value for `pages`: `{text}` (a page like 3 or a range like 2-5)") from None
    if start < 1 or end < start:
        raise invalid_request(f"Invalid value for `pages`: `{text}` (1-based, first <= last)")
    return start, end


async def _fields(request: Request[Any, Any, Any]) -> tuple[dict[str, Any], bytes | None, str | None]:
    """The request's fields, the uploaded bytes (multipart file part) and the part's filename."""
    if request.headers.get("content-type", "").startswith("multipart/"):
        form = await request.form()
        fields = {key: value for key, value in form.items() if not isinstance(value, UploadFile)}
        upload = form.get("file")
        if isinstance(upload, UploadFile):
            return fields, await upload.read(), upload.filename
        return fields, None, None
    from hypnos_server.plugin_api import decode_json

    body = await decode_json(request, ConvertJson)
    return msgspec.structs.asdict(body), None, None


async def convert_request(request: Request[Any, Any, Any], limits: LimitsConfig) -> ConvertRequest:
    """The checked request, with the document's bytes read from the part, the base64 field or the URL."""
    fields, data, filename = await _fields(request)
    model = fields.get("model")
    if not isinstance(model, str) or not model:
        raise invalid_request("Missing required field `model`")
    cap = limits.max_document_bytes
    file_field, url = fields.get("file"), fields.get("url")
    if data is None and isinstance(file_field, str) and file_field:
        if file_field.startswith("data:"):
            data = decode_data_url(file_field, max_bytes=cap, what="document").data
        else:
            data = decode_base64(file_field, max_bytes=cap, what="document")
    elif data is None and isinstance(url, str) and url:
        media = await load_media_url(
            url, max_bytes=cap, allow_remote=limits.allow_remote_image_urls,
            allow_private=limits.allow_private_urls, what="document",
        )  # fmt: skip
        data = media.data
        filename = filename or url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] or None
    if data is None:
        raise invalid_request("Missing required field: send the document as `file` or `url`")
    if not data:
        raise invalid_request("The document is empty")
    if len(data) > cap:
        raise invalid_request(f"The document is {len(data)} bytes, above limits.max_document_bytes ({cap})")
    output_format = str(fields.get("output_format") or "markdown").lower()
    if output_format not in FORMATS:
        raise invalid_request(f"Invalid value for `output_format`: `{output_format}` (markdown or json)")
    name = fields.get("filename")
    job = DocumentInput(
        data=data,
        filename=name if isinstance(name, str) and name else filename,
        pages=page_range(fields.get("pages")),
        ocr=flag(fields.get("ocr", True), "ocr"),
        output_format=output_format,
    )
    describe = fields.get("describe_pictures")
    return ConvertRequest(
        model=model,
        job=job,
        stream=flag(fields.get("stream", False), "stream"),
        describe_pictures=describe if isinstance(describe, str) and describe else None,
        return_pictures=flag(fields.get("return_pictures", False), "return_pictures"),
    )
