"""Through the server app: the audio routes over the real engines, the OpenAI SDK, and a voice-turn workflow."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Any

import hypnos_server.app as hypnos_server_app
import litestar.testing as litestar_testing
import pytest
from hypnos.config import Settings, settings_from_mapping
from hypnos.testing import fake_plugin
from hypnos.testing.speech_text import word_error_rate
from hypnos_audio import plugin
from hypnos_server.plugin_loading import server_plugin_manager

pytestmark = pytest.mark.model

STEADY_VOICE = "piper-joe-steady"  # piper-joe without sampling noise
TEXT = "Please bring the blue umbrella tomorrow morning. The train leaves the station at seven o'clock."


@pytest.fixture(scope="module")
def client(starter_settings: Settings) -> Iterator[Any]:
    """A ready test client over the starter Kokoro, Piper and whisper, a noiseless Piper and a fake chat model."""
    tables = [msgspec_table(m) for m in starter_settings.models]
    tables.append({"id": "fake-chat", "modality": "text_generation", "engine": "fake"})
    joe = next(table for table in tables if table["id"] == "piper-joe")
    steady = {"noise_scale": 0.0, "noise_w_scale": 0.0}  # the same text, the same samples
    tables.append({**joe, "id": STEADY_VOICE, "piper": steady})
    settings = settings_from_mapping({"models_dir": str(starter_settings.models_path), "models": tables})
    manager = server_plugin_manager(autoload=False, plugins=[fake_plugin, plugin])
    with litestar_testing.TestClient(hypnos_server_app.create_app(settings, manager), timeout=120) as test_client:
        for _ in range(1000):
            if test_client.get("/ready").status_code == 200:
                break
            time.sleep(0.02)
        yield test_client


def msgspec_table(model: Any) -> dict[str, Any]:
    """A ModelConfig back as its [[models]] table."""
    table = {
        key: getattr(model, key)
        for key in ("id", "modality", "engine", "weights_path", "voices_path", "tokenizer_path", "initial_tier")
        if getattr(model, key) is not None
    }
    return {key: str(value) for key, value in table.items()}


def parse_wav(data: bytes) -> tuple[int, int, int, bytes]:
    """(riff size, sample rate, data size, samples) of a canonical 44-byte-header WAV."""
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    riff, rate, data_size = struct.unpack_from("<I", data, 4)[0], struct.unpack_from("<I", data, 24)[0], 0
    assert struct.unpack_from("<HHI", data, 20) == (1, 1, 24000) and struct.unpack_from("<H", data, 34)[0] == 16
    assert data[36:40] == b"data"
    data_size = struct.unpack_from("<I", data, 40)[0]
    return riff, rate, data_size, data[44:]


def test_speech_wav_is_complete_and_carries_telemetry(client: Any) -> None:
    response = client.post("/v1/audio/speech", json={"model": "kokoro-82m", "input": TEXT, "voice": "alloy"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/wav"
    riff, rate, size, samples = parse_wav(response.content)
    assert rate == 24000 and size == len(samples) and riff == 36 + size and size > 24000
    for header in ("previous-tier", "gpu-layers", "switch-ms", "inference-ms", "audio-secs", "rtf"):
        assert f"x-hypnos-{header}" in response.headers
    assert float(response.headers["x-hypnos-audio-secs"]) == pytest.approx(size / 2 / 24000, abs=0.01)


def test_speech_formats(client: Any) -> None:
    body = {"model": "kokoro-82m", "input": "Good morning.", "voice": "jf_alpha"}
    pcm = client.post("/v1/audio/speech", json={**body, "response_format": "pcm"})
    assert pcm.status_code == 200 and pcm.headers["content-type"] == "audio/pcm"
    mp3 = client.post("/v1/audio/speech", json={**body, "response_format": "mp3"})
    assert mp3.headers["content-type"] == "audio/wav"
    assert mp3.content[44:] == pcm.content


def test_speech_stream_is_a_playable_open_ended_wav(client: Any) -> None:
    body = {"model": "kokoro-82m", "input": TEXT, "voice": "jf_alpha", "stream": True}
    with client.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        assert "x-hypnos-previous-tier" in response.headers and "x-hypnos-rtf" not in response.headers
        pieces = list(response.iter_bytes())
    data = b"".join(pieces)
    assert data[:4] == b"RIFF" and struct.unpack_from("<I", data, 4)[0] == 0xFFFFFFFF
    assert data[36:40] == b"data" and struct.unpack_from("<I", data, 40)[0] == 0xFFFFFFFF
    assert (len(data) - 44) % 2 == 0 and len(data) - 44 > 24000
    whole = client.post("/v1/audio/speech", json={**body, "stream": False})
    assert whole.content[44:] == data[44:]


def test_openai_sdk_speech_and_transcription(client: Any) -> None:
    import openai

    sdk = openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=client)
    speech = sdk.audio.speech.create(model="kokoro-82m", input=TEXT, voice="nova")
    audio = speech.read()
    assert audio[:4] == b"RIFF"
    result = sdk.audio.transcriptions.create(model="whisper-tiny.en", file=("speech.wav", audio), language="en")
    assert word_error_rate(TEXT, result.text) <= 0.2, result.text


def _tier_soon(client: Any, model_id: str, tier: str, seconds: float = 10.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        models = client.get("/v1/memory/status").json()["models"]
        if next(m for m in models if m["id"] == model_id)["current_tier"] == tier:
            return True
        time.sleep(0.05)
    return False


def test_voice_turn_workflow(client: Any) -> None:
    speech = client.post("/v1/audio/speech", json={"model": "kokoro-82m", "input": TEXT, "voice": "alloy"})
    workflow = {"x-hypnos-workflow": "voice/turn-1"}
    assert _tier_soon(client, "fake-chat", "tier3_nvme_ssd")  # not loaded yet: nothing has used it
    heard = client.post(
        "/v1/audio/transcriptions",
        files={"file": ("question.wav", speech.content, "audio/wav")},
        data={"model": "whisper-tiny.en", "language": "en"},
        headers={**workflow, "x-hypnos-next-model": "fake-chat"},
    )
    assert heard.status_code == 200, heard.text
    answer = heard.json()
    assert word_error_rate(TEXT, answer["text"]) <= 0.2 and answer["language"] == "en"
    assert answer["duration_secs"] == pytest.approx((len(speech.content) - 44) / 2 / 24000, abs=0.01)
    assert answer["hypnos_telemetry"]["engine"]["rtf"] > 0
    # x-hypnos-next-model: the chat model was brought up while (or right after) the transcription ran
    assert _tier_soon(client, "fake-chat", "tier1_gpu_vram")
    chat = client.post(
        "/v1/chat/completions",
        json={"model": "fake-chat", "messages": [{"role": "user", "content": answer["text"]}]},
        headers={**workflow, "x-hypnos-next-model": "kokoro-82m"},
    )
    assert chat.status_code == 200, chat.text
    reply = chat.json()["choices"][0]["message"]["content"]
    spoken = client.post(
        "/v1/audio/speech",
        json={"model": "kokoro-82m", "input": reply, "voice": "alloy"},
        headers={**workflow, "x-hypnos-workflow-end": "true"},
    )
    assert spoken.status_code == 200 and spoken.content[:4] == b"RIFF"
    voice = client.get("/v1/memory/status").json()["latency"]["workflows"]["voice"]
    assert voice["count"] >= 1 and 0 < voice["p50"] <= voice["p95"] <= voice["p99"]


def test_transcription_json_form(client: Any) -> None:
    request = {"model": "kokoro-82m", "input": "Good morning.", "voice": "jf_alpha"}
    speech = client.post("/v1/audio/speech", json=request)
    body = {"model": "whisper-tiny.en", "audio_bytes": list(speech.content), "filename": "clip.wav"}
    response = client.post("/v1/audio/transcriptions", json=body)
    assert response.status_code == 200, response.text
    assert word_error_rate("Good morning.", response.json()["text"]) <= 0.2
    assert "language" not in response.json()


def test_transcription_response_formats_through_the_sdk(client: Any) -> None:
    import openai

    sdk = openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=client)
    audio = client.post("/v1/audio/speech", json={"model": "kokoro-82m", "input": TEXT}).content
    seconds = (len(audio) - 44) / 2 / 24000
    file = ("speech.wav", audio)
    verbose = sdk.audio.transcriptions.create(model="whisper-tiny.en", file=file, response_format="verbose_json")
    assert word_error_rate(TEXT, verbose.text) <= 0.2, verbose.text
    assert verbose.language == "en" and verbose.duration == pytest.approx(seconds, abs=0.01)
    segments = verbose.segments or []
    assert segments and " ".join(s.text for s in segments).split() == verbose.text.split()
    assert all(0 <= s.start < s.end <= seconds + 0.5 for s in segments)
    assert [s.start for s in segments] == sorted(s.start for s in segments)
    text = sdk.audio.transcriptions.create(model="whisper-tiny.en", file=file, response_format="text")
    assert isinstance(text, str) and text.strip() == verbose.text
    srt = sdk.audio.transcriptions.create(model="whisper-tiny.en", file=file, response_format="srt")
    cues = srt.strip().split("\n\n")
    assert len(cues) == len(segments) and cues[0].startswith("1\n00:00:00,")
    assert " ".join(cue.split("\n", 2)[2] for cue in cues).split() == verbose.text.split()
    vtt = sdk.audio.transcriptions.create(model="whisper-tiny.en", file=file, response_format="vtt")
    header, *vtt_cues = vtt.strip().split("\n\n")
    assert header == "WEBVTT" and len(vtt_cues) == len(segments) and vtt_cues[0].startswith("00:00:00.")
    assert " ".join(cue.split("\n", 1)[1] for cue in vtt_cues).split() == verbose.text.split()


def test_speech_models_list_their_voices_and_openai_names_spread_over_them(client: Any) -> None:
    entries = {entry["id"]: entry for entry in client.get("/v1/models").json()["data"]}
    voices = entries["kokoro-82m"]["voices"]
    assert voices == ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]
    # the starter Kokoro pack is Japanese (no registry ships an English one): the listing says so, and Piper is English
    assert entries["kokoro-82m"]["voice_languages"] == dict.fromkeys(voices, "ja")
    assert entries["piper-joe"]["voice_languages"] == {"en_US-joe-medium": "en-US"}
    assert "voices" not in entries["whisper-tiny.en"]
    said = {
        voice: client.post("/v1/audio/speech", json={"model": "kokoro-82m", "input": "Good morning.", "voice": voice})
        for voice in ("alloy", "jf_alpha", "nova", "jf_gongitsune", "echo", "jm_kumo")
    }
    assert all(response.status_code == 200 for response in said.values())
    assert said["alloy"].content == said["jf_alpha"].content
    assert said["nova"].content == said["jf_gongitsune"].content
    assert said["echo"].content == said["jm_kumo"].content
    assert len({said["alloy"].content, said["nova"].content, said["echo"].content}) == 3


def test_piper_speaks_english_that_whisper_hears(client: Any) -> None:
    entries = {entry["id"]: entry for entry in client.get("/v1/models").json()["data"]}
    assert entries["piper-joe"]["voices"] == ["en_US-joe-medium"]
    import openai

    sdk = openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=client)
    audio = sdk.audio.speech.create(model="piper-joe", input=TEXT, voice="alloy").read()
    _, rate, data_size, samples = parse_wav(audio)
    assert rate == 24000 and data_size == len(samples) > 24000  # more than a second of 24 kHz audio
    onyx = client.post("/v1/audio/speech", json={"model": "piper-joe", "input": TEXT, "voice": "onyx"})
    assert onyx.status_code == 200 and onyx.content[:4] == b"RIFF"  # every OpenAI name speaks with the one voice
    heard = sdk.audio.transcriptions.create(model="whisper-tiny.en", file=("joe.wav", audio), language="en")
    assert word_error_rate(TEXT, heard.text) <= 0.1, heard.text
    slow = client.post("/v1/audio/speech", json={"model": "piper-joe", "input": TEXT, "speed": 0.5}).content
    assert len(slow) > 1.5 * len(audio)
