"""A speech stream cut by an engine failure aborts the connection (no clean chunked terminator), so a client can tell
truncated audio from a whole answer: the real server (granian), the engine in its own host killed mid-stream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypnos_server.testing import live_server

CONFIG = """
[[models]]
id = "speaker"
modality = "text_to_speech"
engine = "fake"
[models.fake]
crash_after_chunks = 2
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("speech-cut") / "hypnos.toml"
    path.write_text(CONFIG)
    with live_server(path) as base:
        yield base


def speak(server: str, text: str) -> tuple[int, bytes]:
    body = {"model": "speaker", "input": text, "stream": True, "response_format": "pcm"}
    received = b""
    with httpx.stream("POST", f"{server}/v1/audio/speech", json=body, timeout=60) as response:
        for chunk in response.iter_bytes():
            received += chunk
        return response.status_code, received


def test_a_stream_cut_by_an_engine_crash_is_an_aborted_body_not_a_short_answer(server: str) -> None:
    status, whole = speak(server, "One. Two.")  # two phrases: the engine stops before its fault
    assert status == 200 and len(whole) > 0
    with pytest.raises(httpx.RemoteProtocolError):  # the host dies at the third phrase
        speak(server, "One. Two. Three. Four.")
    status, again = speak(server, "One. Two.")  # the model's host is back for the next request
    assert status == 200 and again == whole
