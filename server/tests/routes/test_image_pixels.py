"""Images whose header declares more than limits.max_image_pixels are refused before any engine decodes them."""

from __future__ import annotations

import base64
import struct
import zlib

from litestar.testing import TestClient
from server_kit import build_app, config, error_of, wait_ready


def png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk


def chat_with(image: bytes) -> dict:
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    content = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    return {"model": "fake-chat", "messages": [{"role": "user", "content": content}]}


def test_a_chat_image_over_the_pixel_limit_is_400(client):
    response = client.post("/v1/chat/completions", json=chat_with(png_header(60_000, 60_000)))
    assert response.status_code == 400
    assert error_of(response)["type"] == "invalid_request_error"
    assert "60000x60000" in error_of(response)["message"] and "max_image_pixels" in error_of(response)["message"]


def test_an_image_within_the_limit_passes(client):
    assert client.post("/v1/chat/completions", json=chat_with(png_header(640, 480))).status_code == 200


def test_the_limit_is_the_operators():
    with TestClient(build_app(config(limits={"max_image_pixels": 1000}))) as client:
        wait_ready(client)
        assert client.post("/v1/chat/completions", json=chat_with(png_header(40, 40))).status_code == 400
        assert client.post("/v1/chat/completions", json=chat_with(png_header(20, 20))).status_code == 200


def test_an_edit_reference_over_the_pixel_limit_is_400(client):
    files = {"image": ("huge.png", png_header(70_000, 70_000), "image/png")}
    response = client.post("/v1/images/edits", data={"model": "fake-image", "prompt": "x"}, files=files)
    assert response.status_code == 400
    assert "70000x70000" in error_of(response)["message"]
