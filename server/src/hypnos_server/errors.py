"""The one error mapping: every exception becomes the spec's error body (or a plain-text 408/413), never a traceback."""

from __future__ import annotations

import logging
import re
from typing import Any

import msgspec
from hypnos.errors import HypnosError, clip, invalid_request, not_found, server_error
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)
from litestar.types import Send

from hypnos_server.state import CONTEXT_KEY

logger = logging.getLogger(__name__)


class PlainTextError(HypnosError):
    """An error answered as plain text (408 from the timeout layer, 413 from the body-limit layer)."""

    def __init__(self, status: int, type: str, message: str) -> None:
        super().__init__(status, type, message)


def request_timeout(seconds: float) -> PlainTextError:
    """408: request_timeout_secs elapsed before the response headers were sent."""
    return PlainTextError(
        408, "request_timeout", f"Request timeout: no response within {seconds:g} s (limits.request_timeout_secs)"
    )


def body_timeout(seconds: float) -> PlainTextError:
    """408: the request body stalled (no part of it for limits.body_timeout_secs); the connection is closed."""
    error = PlainTextError(
        408,
        "request_timeout",
        f"Request timeout: the request body stalled for {seconds:g} s (limits.body_timeout_secs)",
    )
    error.headers["Connection"] = "close"
    return error


def slow_body(rate: float, grace_secs: float) -> PlainTextError:
    """408: the request body came slower than limits.min_body_bytes_per_sec; the connection is closed."""
    error = PlainTextError(
        408,
        "request_timeout",
        f"Request timeout: the request body came slower than {rate:g} bytes/s after its first {grace_secs:g} s "
        "(limits.min_body_bytes_per_sec)",
    )
    error.headers["Connection"] = "close"
    return error


def payload_too_large(limit: int, multipart: bool) -> HypnosError:
    """413: plain text for JSON bodies, the JSON error naming the limit for multipart uploads."""
    message = f"The request body is larger than limits.max_body_bytes ({limit} bytes)"
    if multipart:
        return HypnosError(413, "payload_too_large", message)
    return PlainTextError(413, "payload_too_large", f"Payload too large: {message}")


def field_error(error: msgspec.ValidationError | msgspec.DecodeError) -> HypnosError:
    """400 naming the offending field of a body msgspec could not decode."""
    text = str(error)
    if isinstance(error, msgspec.DecodeError) and not isinstance(error, msgspec.ValidationError):
        return invalid_request(f"The request body is not valid JSON: {text}")
    missing = re.match(r"Object missing required field `([^`]*)`(?: - at `\$\.?(.*)`)?", text)
    if missing:
        where = ".".join(p for p in (missing.group(2), missing.group(1)) if p)
        return invalid_request(f"Missing required field `{where}`")
    if " - at `$" in text:
        what, _, where = text.partition(" - at `$")
        name = where.rstrip("`").lstrip(".") or "body"
        return invalid_request(f"Invalid value for `{name}`: {what}")
    return invalid_request(f"Invalid request body: {text}")


def too_deep() -> HypnosError:
    """400 for a JSON body nested deeper than the decoder follows."""
    return invalid_request("The request body is nested too deeply to decode")


def _from_validation(exc: ValidationException) -> HypnosError:
    extra = exc.extra if isinstance(exc.extra, list) else []
    for item in extra:
        if isinstance(item, dict) and item.get("key"):
            return invalid_request(f"Invalid value for `{item['key']}`: {item.get('message', 'invalid')}")
    return invalid_request(exc.detail or "Invalid request")


def as_hypnos_error(exc: BaseException, method: str = "", path: str = "") -> HypnosError:
    """Map any exception to a HypnosError: our own pass through, Litestar's get the spec's types, others are 500."""
    if isinstance(exc, HypnosError):
        return exc
    if isinstance(exc, (msgspec.ValidationError, msgspec.DecodeError)):
        return field_error(exc)
    if isinstance(exc, RecursionError) and "deserializ" in str(exc):  # msgspec's depth limit: the body's fault
        return too_deep()
    if isinstance(exc, NotFoundException):
        return not_found(f"No route for {method} {clip(path)}".strip())
    if isinstance(exc, MethodNotAllowedException):
        return HypnosError(405, "invalid_request_error", f"The method {clip(method)} is not allowed on {clip(path)}")
    if isinstance(exc, ValidationException):
        return _from_validation(exc)
    if isinstance(exc, HTTPException):
        if exc.status_code == 413:
            return PlainTextError(413, "payload_too_large", "Payload too large")
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        error = HypnosError(exc.status_code, kind, exc.detail or "HTTP error")
        error.headers.update(exc.headers or {})
        return error
    logger.error("unhandled %s on %s %s", type(exc).__name__, method, path, exc_info=exc)
    return server_error("Internal server error; report it with the x-request-id of this response")


ANTHROPIC_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})  # errors in Anthropic's shape there
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    507: "overloaded_error",
}


def anthropic_body(error: HypnosError) -> dict[str, Any]:
    """Anthropic's error body: {"type": "error", "error": {"type", "message", "details"?}}, the type from the
    status."""
    kind = ANTHROPIC_TYPES.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
    detail: dict[str, Any] = {"type": kind, "message": error.message}
    if error.code is not None:  # the SDKs read `error.details.error_code` (message threads branch on it)
        detail["details"] = {"error_code": error.code}
    return {"type": "error", "error": detail}


COHERE_PATHS = frozenset({"/v2/rerank"})  # errors in Cohere's shape there, {"message": ...}, with the spec's "error"


def render(error: HypnosError, path: str = "") -> tuple[int, dict[str, str], bytes, str]:
    """Status, headers, body and media type of an error response (Anthropic's shape on the Anthropic routes,
    Cohere's on Cohere's)."""
    headers = error.response_headers()
    if error.status == 401:
        headers.setdefault("WWW-Authenticate", 'Bearer realm="hypnos"')
    if isinstance(error, PlainTextError):
        return error.status, headers, error.message.encode(), "text/plain; charset=utf-8"
    if path in ANTHROPIC_PATHS:
        return error.status, headers, msgspec.json.encode(anthropic_body(error)), "application/json"
    if path in COHERE_PATHS:
        body = {
            "message": error.message,
            **msgspec.to_builtins(error.body()),
        }  # Cohere's field, and the spec's error object beside it
        return error.status, headers, msgspec.json.encode(body), "application/json"
    return error.status, headers, msgspec.json.encode(error.body()), "application/json"


def exception_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    """Litestar's exception handler for every exception: the spec's body, never a traceback."""
    error = as_hypnos_error(exc, request.method, request.url.path)
    _note_error(request.scope, error)
    status, headers, body, media_type = render(error, request.url.path)
    return Response(content=body, status_code=status, headers=headers, media_type=media_type)


def _note_error(scope: Any, error: HypnosError) -> None:
    context = scope.get("state", {}).get(CONTEXT_KEY)
    if context is not None:
        context.record.error = error.message
        context.record.error_type = error.type


async def send_error(scope: Any, send: Send, error: HypnosError) -> None:
    """Answer an error straight from an ASGI layer (outside Litestar), through the same rendering."""
    _note_error(scope, error)
    path, raw = scope.get("path", ""), scope.get("raw_path") or b""
    canonical = not raw or raw.decode("latin-1") == path  # a trick path is nobody's route: the OpenAI shape
    status, headers, body, media_type = render(error, path if canonical else "")
    raw_headers = [(b"content-type", media_type.encode()), (b"content-length", str(len(body)).encode())]
    raw_headers.extend((name.lower().encode(), value.encode()) for name, value in headers.items())
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
