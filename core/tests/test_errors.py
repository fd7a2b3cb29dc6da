"""The error body of spec section 4, with param and code only on auth and quota errors and where OpenAI has a code
clients test for (an unknown model)."""

from __future__ import annotations

import msgspec
from hypnos.errors import HypnosError, encode_error, invalid_request, model_busy, model_not_found, staging


def test_plain_error_body_has_message_and_type_only() -> None:
    body = msgspec.json.decode(encode_error(invalid_request("bad `x`")))
    assert body == {"error": {"message": "bad `x`", "type": "invalid_request_error"}}


def test_an_unknown_model_has_openais_code_and_param() -> None:
    body = msgspec.json.decode(encode_error(model_not_found("x")))
    assert body["error"]["type"] == body["error"]["code"] == "model_not_found" and body["error"]["param"] == "model"
    assert "`x`" in body["error"]["message"]


def test_quota_error_has_param_null_and_code() -> None:
    error = HypnosError(429, "rate_limit_error", "slow down", retry_after=12, code="requests_per_minute")
    body = msgspec.json.decode(encode_error(error))
    assert body["error"]["param"] is None and body["error"]["code"] == "requests_per_minute"
    assert error.response_headers() == {"Retry-After": "12"}


def test_model_busy_has_no_retry_after_and_staging_has_five() -> None:
    assert model_busy("full").response_headers() == {}
    assert staging().status == 503 and staging().response_headers() == {"Retry-After": "5"}
