"""The bad files the server itself checks answer 400 in the spec's shape, free of reprs, paths and exception text.

The files only an engine can decode are checked the same way in its plugin's tests: image edits (hypnos-diffusion's
conformance bad request), chat image and audio parts (hypnos-llama's test_bad_media), transcriptions (hypnos-audio's
whisper conformance bad request), documents (hypnos-docling's conformance bad request).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from hypnos.testing.clean_errors import assert_clean_message
from litestar.testing import TestClient
from server_kit import build_app, error_of, wait_ready

JUNK = b"%PDF-1.7 this is not what the route takes \x00\xff"
PNG_HEADER_ONLY = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
RIFF_BROKEN = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00"


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def chat_with(part: dict[str, Any]) -> dict[str, Any]:
    return {"model": "fake-chat", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}]}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient[Any]]:
    with TestClient(build_app()) as test_client:
        wait_ready(test_client)
        yield test_client


CASES = {
    "transcription of a broken WAV": lambda c: c.post(
        "/v1/audio/transcriptions", data={"model": "fake-chat"}, files={"file": ("clip.wav", RIFF_BROKEN, "audio/wav")}
    ),
    "chat image part that is not base64": lambda c: c.post(
        "/v1/chat/completions", json=chat_with({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}})
    ),
    "chat audio part that is a broken WAV": lambda c: c.post(
        "/v1/chat/completions",
        json=chat_with(
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(RIFF_BROKEN).decode(), "format": "wav"}}
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_file_is_a_clean_400(client: TestClient[Any], case: str) -> None:
    response = CASES[case](client)
    assert response.status_code == 400, response.text[:300]
    error = error_of(response)
    assert error["type"] == "invalid_request_error"
    assert_clean_message(error["message"])
