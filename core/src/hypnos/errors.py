"""The one exception family every layer raises; the server maps it to the spec's error body."""

from __future__ import annotations

import msgspec

from hypnos.types import ErrorBody, ErrorDetail

ECHO_LIMIT = 256
MESSAGE_LIMIT = 2048  # no error message grows with what the client sent


def clip(text: object, limit: int = ECHO_LIMIT) -> str:
    """A client-supplied value as an error or log may echo it: at most `limit` characters, then an ellipsis."""
    value = str(text)
    return value if len(value) <= limit else value[:limit] + "…"


class HypnosError(Exception):
    """An error a client sees: HTTP status, machine-readable type, message, optional Retry-After and code."""

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        *,
        retry_after: int | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        message = clip(message, MESSAGE_LIMIT)
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.retry_after = retry_after
        self.code = code
        self.param = param  # the request field at fault, stated with the code
        self.headers = dict(headers or {})

    def body(self) -> ErrorBody:
        """The spec's error body; an error with a code (auth, quota, a named field) carries its param and the code."""
        if self.code is None:
            return ErrorBody(ErrorDetail(message=self.message, type=self.type))
        return ErrorBody(ErrorDetail(message=self.message, type=self.type, param=self.param, code=self.code))

    def response_headers(self) -> dict[str, str]:
        """Headers the response must carry (Retry-After and any extras)."""
        headers = dict(self.headers)
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        return headers

    def __repr__(self) -> str:
        return f"HypnosError({self.status}, {self.type!r}, {self.message!r})"


def invalid_request(message: str) -> HypnosError:
    """400: malformed body, bad field value, a limit exceeded, modality mismatch."""
    return HypnosError(400, "invalid_request_error", message)


def model_not_found(model_id: str) -> HypnosError:
    """404: no model with this id is configured (`code` as OpenAI's, which clients test for)."""
    message = f"The model `{clip(model_id)}` does not exist (see GET /v1/models)."
    return HypnosError(404, "model_not_found", message, code="model_not_found", param="model")


def model_disabled(model_id: str) -> HypnosError:
    """404: the model is configured but switched off."""
    return HypnosError(
        404, "model_disabled", f"The model `{model_id}` is disabled; POST /v1/models/{model_id}/enable turns it on."
    )


def not_found(message: str) -> HypnosError:
    """404: unknown document, picture, log record or route."""
    return HypnosError(404, "not_found", message)


def model_busy(message: str) -> HypnosError:
    """429 without Retry-After: the model's queue is full, or it is leased while a move was asked."""
    return HypnosError(429, "model_busy", message)


def staging() -> HypnosError:
    """503 during startup staging (section 3)."""
    return HypnosError(
        503,
        "model_not_available",
        "Hypnos is still pre-staging its startup models; retry shortly (GET /ready reports when it is done)",
        retry_after=5,
    )


def server_error(message: str) -> HypnosError:
    """500: the engine failed."""
    return HypnosError(500, "server_error", message)


def encode_error(error: HypnosError) -> bytes:
    """The JSON bytes of an error's body."""
    return msgspec.json.encode(error.body())
