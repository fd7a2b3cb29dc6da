"""Multipart routes: a text part that is not valid in its charset is a 400, never a 500 (found by the fuzz session)."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import TestClient
from server_kit import error_of

BOUNDARY = "fuzzboundary"


def _form(*parts: bytes) -> bytes:
    return b"".join(b"--" + BOUNDARY.encode() + b"\r\n" + part + b"\r\n" for part in parts) + b"--fuzzboundary--\r\n"


def _field(name: str, value: bytes, charset: str | None = None) -> bytes:
    kind = b"" if charset is None else f"Content-Type: text/plain; charset={charset}\r\n".encode()
    return f'Content-Disposition: form-data; name="{name}"\r\n'.encode() + kind + b"\r\n" + value


@pytest.mark.parametrize("route", ["/v1/images/edits", "/v1/audio/transcriptions"])
@pytest.mark.parametrize(
    "bad_part",
    [_field("model", b"\x89PNG\xff\xfe"), _field("prompt", b"ok", charset="no-such-charset")],
    ids=["invalid-utf8", "unknown-charset"],
)
def test_undecodable_text_part_is_a_400(client: TestClient[Any], route: str, bad_part: bytes) -> None:
    body = _form(bad_part, _field("image", b"\x00\x01"))
    response = client.post(route, content=body, headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"})
    assert response.status_code == 400
    assert error_of(response)["type"] == "invalid_request_error"
    assert "not valid text" in error_of(response)["message"]
