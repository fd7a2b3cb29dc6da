"""POST /v1/audio/transcriptions and POST /v1/audio/speech."""

from __future__ import annotations

import struct

import pytest
from hypnos.engine import EngineCapabilities
from hypnos.kit.audio import wav_header
from hypnos_server.routes.audio import pick_voice
from litestar.testing import TestClient
from server_kit import build_app, config, error_of, wait_ready


def one_second_wav() -> bytes:
    pcm = b"\x00\x00" * 16000
    return wav_header(len(pcm), 16000) + pcm


def test_multipart_transcription(client):
    response = client.post(
        "/v1/audio/transcriptions",
        files={"file": ("clip.wav", one_second_wav(), "audio/wav")},
        data={"model": "fake-chat", "language": "it", "response_format": "verbose_json"},
    )
    assert response.status_code == 200
    body = response.json()
    assert body["text"].startswith("fake transcript")
    assert body["language"] == "it"
    assert body["duration_secs"] == 1.0
    assert body["hypnos_telemetry"]["engine"]["audio_secs"] == 1.0


def test_json_transcription_with_audio_bytes(client):
    audio = list(one_second_wav())
    response = client.post("/v1/audio/transcriptions", json={"model": "fake-chat", "audio_bytes": audio})
    assert response.status_code == 200
    assert response.json()["duration_secs"] == 1.0
    assert "language" not in response.json()


def test_transcription_needs_model_and_file(client):
    missing_file = client.post("/v1/audio/transcriptions", files={"other": ("x", b"1")}, data={"model": "fake-chat"})
    assert missing_file.status_code == 400 and "file" in error_of(missing_file)["message"]
    bad_bytes = client.post("/v1/audio/transcriptions", json={"model": "fake-chat", "audio_bytes": [300]})
    assert bad_bytes.status_code == 400 and "audio_bytes" in error_of(bad_bytes)["message"]


def test_audio_above_max_audio_bytes_is_400():
    with TestClient(build_app(config(limits={"max_audio_bytes": 100}))) as client:
        wait_ready(client)
        response = client.post(
            "/v1/audio/transcriptions", files={"file": ("a.wav", b"x" * 200)}, data={"model": "fake-chat"}
        )
        assert response.status_code == 400
        assert "max_audio_bytes" in error_of(response)["message"]


def test_speech_wav(client):
    response = client.post("/v1/audio/speech", json={"model": "fake-chat", "input": "Hello there. Bye."})
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/wav"
    data = response.content
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    channels, rate = struct.unpack_from("<HI", data, 22)
    bits = struct.unpack_from("<H", data, 34)[0]
    assert (channels, rate, bits) == (1, 24000, 16)
    assert struct.unpack_from("<I", data, 40)[0] == len(data) - 44
    for header in ("previous-tier", "gpu-layers", "switch-ms", "inference-ms", "audio-secs", "rtf"):
        assert f"x-hypnos-{header}" in response.headers
    assert float(response.headers["x-hypnos-audio-secs"]) == pytest.approx((len(data) - 44) / 2 / 24000, abs=1e-3)


def test_speech_pcm_is_headerless(client):
    wav = client.post("/v1/audio/speech", json={"model": "fake-chat", "input": "Hello."}).content
    pcm = client.post("/v1/audio/speech", json={"model": "fake-chat", "input": "Hello.", "response_format": "pcm"})
    assert pcm.headers["content-type"] == "audio/pcm"
    assert pcm.content == wav[44:]


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_unimplemented_formats_fall_back_to_wav(client, fmt):
    response = client.post("/v1/audio/speech", json={"model": "fake-chat", "input": "Hi.", "response_format": fmt})
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/wav"
    assert response.content[:4] == b"RIFF"


def test_unknown_format_is_400(client):
    response = client.post("/v1/audio/speech", json={"model": "fake-chat", "input": "Hi.", "response_format": "ogg"})
    assert response.status_code == 400


def test_speech_stream_has_an_open_ended_wav_header(client):
    response = client.post("/v1/audio/speech", json={"model": "fake-chat", "input": "One. Two.", "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/wav"
    data = response.content
    assert data[:4] == b"RIFF"
    assert struct.unpack_from("<I", data, 4)[0] == 0xFFFFFFFF
    assert struct.unpack_from("<I", data, 40)[0] == 0xFFFFFFFF
    assert "x-hypnos-previous-tier" in response.headers and "x-hypnos-switch-ms" in response.headers
    assert "x-hypnos-rtf" not in response.headers
    whole = client.post("/v1/audio/speech", json={"model": "fake-chat", "input": "One. Two."}).content
    assert data[44:] == whole[44:]


def test_speech_stream_pcm(client):
    response = client.post(
        "/v1/audio/speech", json={"model": "fake-chat", "input": "One.", "stream": True, "response_format": "pcm"}
    )
    assert response.headers["content-type"] == "audio/pcm"
    assert response.content[:4] != b"RIFF" and len(response.content) % 2 == 0


def test_empty_speech_input_is_400(client):
    assert client.post("/v1/audio/speech", json={"model": "fake-chat", "input": "  "}).status_code == 400


PACK = EngineCapabilities(voices=["jf_alpha", "jm_kumo", "alloy"], voice_aliases={"echo": "jm_kumo"})


@pytest.mark.parametrize(
    ("voice", "capabilities", "expected"),
    [
        ("jm_kumo", PACK, "jm_kumo"),  # a voice of the model's
        ("alloy", PACK, "alloy"),  # a voice of its own wins over an alias of the name
        ("echo", PACK, "jm_kumo"),  # an alias its engine declares
        ("nobody", PACK, "jf_alpha"),  # anything else: its first voice
        ("echo", EngineCapabilities(), "echo"),  # a model listing no voices: the name as asked, the engine decides
    ],
)
def test_pick_voice_from_the_models_voices_and_aliases(voice, capabilities, expected):
    assert pick_voice(voice, capabilities) == expected
