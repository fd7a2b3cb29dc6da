"""The starter speech and transcription models through the OpenAI Node SDK (npm `openai`, tests/node) against a real
server: OpenAI voice names speak English on the starter voices, and every transcription response_format."""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

import pytest
from hypnos.testing.speech_text import word_error_rate
from hypnos_server.testing import node_call, node_sdk, node_sdk_calls

pytestmark = pytest.mark.model
NODE_DIR = Path(__file__).resolve().parents[3] / "tests" / "node"
TEXT = "Please bring the blue umbrella tomorrow morning. The train leaves the station at seven o'clock."


@pytest.fixture(scope="module")
def node_dir() -> Path:
    """tests/node with the pinned OpenAI Node SDK installed (fails without node and npm)."""
    return node_sdk(NODE_DIR)


@pytest.fixture(scope="module")
def spoken(node_dir: Path, audio_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """TEXT spoken by each starter speech model through the Node SDK with an OpenAI voice name, as WAV files."""
    asks = {"piper-joe": "alloy", "kokoro-82m": "nova"}
    calls = [
        node_call("audio.speech.create", {"model": model, "input": TEXT, "voice": voice}, binary=True)
        for model, voice in asks.items()
    ]
    folder = tmp_path_factory.mktemp("node-speech")
    files = {}
    for model, result in zip(asks, node_sdk_calls(node_dir, audio_server, calls), strict=True):
        assert "error" not in result, result
        files[model] = folder / f"{model}.wav"
        files[model].write_bytes(base64.b64decode(result["value"]))
    return files


def transcribe(node_dir: Path, server: str, audio: Path, *formats: str | None) -> list[Any]:
    """What the Node SDK's audio.transcriptions.create returns for `audio` in each response_format (None: default)."""
    calls = [
        node_call(
            "audio.transcriptions.create",
            {"model": "whisper-tiny.en", **({"response_format": fmt} if fmt else {})},
            file=(audio.name, audio),
        )
        for fmt in formats
    ]
    results = node_sdk_calls(node_dir, server, calls)
    assert all("error" not in result for result in results), results
    return [result["value"] for result in results]


def test_openai_voice_names_speak_english_whisper_hears(
    node_dir: Path, audio_server: str, spoken: dict[str, Path]
) -> None:
    import openai

    sdk = openai.OpenAI(base_url=f"{audio_server}/v1", api_key="unused", max_retries=0, timeout=300)
    for audio in (spoken["piper-joe"].read_bytes(), spoken["kokoro-82m"].read_bytes()):
        assert audio[:4] == b"RIFF" and struct.unpack_from("<I", audio, 24)[0] == 24000 and len(audio) > 48044
    # Kokoro is deterministic: the Node SDK's bytes are the Python SDK's (nova: a pack voice, not the first one)
    from_python = sdk.audio.speech.create(model="kokoro-82m", input=TEXT, voice="nova").read()
    assert spoken["kokoro-82m"].read_bytes() == from_python
    assert from_python != sdk.audio.speech.create(model="kokoro-82m", input=TEXT, voice="jf_alpha").read()
    [heard] = transcribe(node_dir, audio_server, spoken["piper-joe"], None)
    assert word_error_rate(TEXT, heard["text"]) <= 0.1, heard  # Piper's English voice, asked for as alloy


def test_every_transcription_response_format(node_dir: Path, audio_server: str, spoken: dict[str, Path]) -> None:
    audio = spoken["piper-joe"]
    seconds = (audio.stat().st_size - 44) / 2 / 24000
    default, text, srt, vtt, verbose = transcribe(
        node_dir, audio_server, audio, None, "text", "srt", "vtt", "verbose_json"
    )
    assert word_error_rate(TEXT, verbose["text"]) <= 0.1, verbose
    assert default["text"] == verbose["text"]
    assert verbose["language"] == "en" and verbose["duration"] == pytest.approx(seconds, abs=0.01)
    segments = verbose["segments"]
    assert segments and " ".join(s["text"] for s in segments).split() == verbose["text"].split()
    assert all(0 <= s["start"] < s["end"] <= seconds + 0.5 for s in segments)
    assert isinstance(text, str) and text.strip() == verbose["text"]  # a plain string, not a JSON object
    cues = srt.strip().split("\n\n")
    assert len(cues) == len(segments) and cues[0].startswith("1\n00:00:00,")
    assert " ".join(cue.split("\n", 2)[2] for cue in cues).split() == verbose["text"].split()
    header, *vtt_cues = vtt.strip().split("\n\n")
    assert header == "WEBVTT" and len(vtt_cues) == len(segments) and vtt_cues[0].startswith("00:00:00.")
    assert " ".join(cue.split("\n", 1)[1] for cue in vtt_cues).split() == verbose["text"].split()
