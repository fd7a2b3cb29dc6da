"""Hostile input is a 400 in the spec's shape, never a 500: deep JSON, broken WAV headers, odd deadlines."""

from __future__ import annotations

import base64
import struct

import pytest
from hypnos_server.errors import COHERE_PATHS
from path_tricks import app_routes
from server_kit import build_app, error_of

CHAT = {"model": "fake-chat", "messages": [{"role": "user", "content": "hello"}]}


def deep_array(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def assert_invalid(response, *, leaks: tuple[str, ...] = (), path: str = "") -> None:
    assert response.status_code == 400, response.text[:300]
    if path in COHERE_PATHS:  # Cohere's own error shape there: {"message": ...}
        message = response.json()["message"]
    else:
        assert error_of(response)["type"] == "invalid_request_error"
        message = error_of(response)["message"]
    assert response.headers["x-request-id"].startswith("req-")
    for word in ("Traceback", "Error:", "struct", "reshape", *leaks):
        assert word not in message


@pytest.mark.parametrize("depth", [1_000, 100_000])
@pytest.mark.parametrize("shape", [deep_array, deep_object])
def test_deep_json_on_every_json_route_is_400(client, depth, shape):
    posts = [path for method, path in app_routes(client.app) if method in ("POST", "PUT")]
    assert "/v1/chat/completions" in posts
    json_type = {"content-type": "application/json"}
    for path in posts:
        response = client.post(path, content=shape(depth), headers=json_type)
        if client.post(path, content="[", headers=json_type).status_code == 400:  # the route reads a JSON body
            assert_invalid(response, path=path)
        else:
            assert response.status_code < 500, (path, response.text[:200])


@pytest.mark.parametrize("depth", [70, 900, 100_000])
def test_deep_tool_parameters_are_400(client, depth):
    tool = '{"type":"function","function":{"name":"f","parameters":' + deep_object(depth) + "}}"
    body = '{"model":"fake-chat","messages":[{"role":"user","content":"hi"}],"tools":[' + tool + "]}"
    response = client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert_invalid(response)


def test_a_real_tool_schema_still_passes(client):
    schema = {"type": "object", "properties": {"city": {"type": "object", "properties": {"name": {"type": "string"}}}}}
    tools = [{"type": "function", "function": {"name": "weather", "parameters": schema}}]
    assert client.post("/v1/chat/completions", json={**CHAT, "tools": tools}).status_code == 200


@pytest.mark.parametrize("value", ["inf", "-inf", "1e999", "nan", "-5", "soon", ""])
def test_bad_deadlines_are_400(client, value):
    response = client.post("/v1/chat/completions", json=CHAT, headers={"x-hypnos-deadline-ms": value})
    assert_invalid(response)
    assert "x-hypnos-deadline-ms" in error_of(response)["message"]


@pytest.mark.parametrize("value", ["60000", "1e6", "1e300"])
def test_good_deadlines_pass(client, value):
    response = client.post("/v1/chat/completions", json=CHAT, headers={"x-hypnos-deadline-ms": value})
    assert response.status_code == 200


def wav(
    *,
    channels=1,
    rate=16000,
    bits=16,
    block_align=None,
    tag=1,
    fmt_size=16,
    fmt_bytes=None,
    data=b"\0\0" * 100,
) -> bytes:
    align = channels * bits // 8 if block_align is None else block_align
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits)
    fmt = fmt if fmt_bytes is None else fmt_bytes
    body = b"WAVE" + b"fmt " + struct.pack("<I", fmt_size) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


BAD_WAVS = {
    "truncated fmt chunk": b"RIFF\x24\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0",
    "short fmt chunk": wav(fmt_size=8, fmt_bytes=b"\x01\0\x01\0\x80\x3e\0\0"),
    "bad block_align": wav(channels=2, block_align=3, data=b"\0" * 9),
    "zero block_align": wav(block_align=0),
    "odd samples in stereo": wav(channels=2, data=b"\0\0" * 3),
    "rate 1 Hz": wav(rate=1),
    "rate 0 Hz": wav(rate=0),
    "absurd rate": wav(rate=4_000_000_000, block_align=1, bits=8),
    "zero channels": wav(channels=0, block_align=2),
    "12 bits": wav(bits=12, block_align=2),
    "mu-law": wav(tag=7, bits=8),
    "no data chunk": b"RIFF\x1c\0\0\0WAVEfmt \x10\0\0\0" + struct.pack("<HHIIHH", 1, 1, 16000, 32000, 2, 16),
}


@pytest.mark.parametrize("name", list(BAD_WAVS))
def test_malformed_wav_upload_is_400(client, name):
    files = {"file": ("clip.wav", BAD_WAVS[name], "audio/wav")}
    response = client.post("/v1/audio/transcriptions", data={"model": "fake-chat"}, files=files)
    assert_invalid(response)
    assert "WAV" in error_of(response)["message"]


@pytest.mark.parametrize("name", list(BAD_WAVS))
def test_malformed_wav_in_a_chat_audio_part_is_400(client, name):
    audio = {"data": base64.b64encode(BAD_WAVS[name]).decode(), "format": "wav"}
    message = {"role": "user", "content": [{"type": "input_audio", "input_audio": audio}]}
    response = client.post("/v1/chat/completions", json={"model": "fake-chat", "messages": [message]})
    assert_invalid(response)


def test_a_good_wav_still_passes(client):
    files = {"file": ("clip.wav", wav(channels=2, data=b"\0\0" * 200), "audio/wav")}
    assert client.post("/v1/audio/transcriptions", data={"model": "fake-chat"}, files=files).status_code == 200


def test_route_list_has_the_json_routes():
    routes = app_routes(build_app())
    assert ("POST", "/v1/embeddings") in routes and ("POST", "/v1/logs/level") in routes
