"""The kit's check for error messages: reprs, paths and exception text are caught; ordinary messages pass."""

from __future__ import annotations

import pytest
from hypnos.testing.clean_errors import message_leaks


@pytest.mark.parametrize(
    "message",
    [
        "image 0 is not readable (cannot identify image file <_io.BytesIO object at 0x7f3a1c2b9e40>)",
        "the model `x` is missing a file: [Errno 2] No such file or directory: '/srv/hypnos/models/kokoro.onnx'",
        "fetching the image failed: ConnectionRefusedError",
        "cannot read C:\\\\models\\\\x.gguf",
        'Traceback (most recent call last):\n  File "/usr/lib/python3.11/x.py", line 3',
    ],
)
def test_leaky_messages_are_caught(message: str) -> None:
    assert message_leaks(message)


@pytest.mark.parametrize(
    "message",
    [
        "image 0 is not a readable PNG, JPEG or WebP image",
        "`x` is not in the model catalog (GET /v1/models/catalog)",
        "Hypnos is still pre-staging its startup models; retry shortly (GET /ready reports when it is done)",
        "the audio is not a 16-bit PCM WAV; WAV/PCM is the reliable format",
        "The model `a/b` failed; report it with the x-request-id of this response",
    ],
)
def test_ordinary_messages_pass(message: str) -> None:
    assert message_leaks(message) == []
