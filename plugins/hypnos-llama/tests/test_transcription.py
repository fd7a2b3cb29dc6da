"""A llama model whose projector takes audio transcribes (section 9): the family's instruction, or the prompt."""

from __future__ import annotations

import io
import time
import wave
from collections.abc import Iterator
from typing import Any

import pytest
from hypnos.chat import AudioPart, TextPart
from hypnos.engine import CancelToken, ChatFinished, TranscriptionInput
from hypnos.errors import HypnosError
from hypnos.types import Modality
from hypnos_llama.testing import tier1
from hypnos_llama.transcription import GEMMA_INSTRUCTION, transcription_chat


def wav(seconds: float = 1.0, rate: int = 16000) -> bytes:
    import numpy as np

    times = np.arange(int(seconds * rate)) / rate
    samples = (8000 * np.sin(2 * np.pi * 440 * times)).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return buffer.getvalue()


# ---- the instruction, without a model -------------------------------------------------------------------------------


def test_gemma_style_families_get_the_audio_then_the_instruction() -> None:
    chat = transcription_chat("qwen2", TranscriptionInput(audio=b"RIFF", language="de"), max_tokens=64)
    (message,) = chat.messages
    assert message.role == "user" and isinstance(message.parts[0], AudioPart)
    assert message.text() == GEMMA_INSTRUCTION + " The speech is in German."
    assert not chat.thinking and chat.sampling.temperature == 0


def test_a_prompt_replaces_the_instruction() -> None:
    chat = transcription_chat("gemma3n", TranscriptionInput(audio=b"RIFF", prompt="Names: Anna, Bo."), max_tokens=64)
    assert [part.text for part in chat.messages[0].parts if isinstance(part, TextPart)] == ["Names: Anna, Bo."]


def test_lfm_gets_a_system_prompt_and_a_prompt_replaces_it() -> None:
    chat = transcription_chat("lfm2", TranscriptionInput(audio=b"RIFF", language="it"), max_tokens=64)
    assert [(m.role, m.text()) for m in chat.messages] == [("system", "Perform ASR in Italian."), ("user", "")]
    assert transcription_chat("lfm2", TranscriptionInput(audio=b"x"), max_tokens=8).messages[0].text() == "Perform ASR."
    unknown = transcription_chat("lfm2", TranscriptionInput(audio=b"x", language="xx"), max_tokens=8)
    assert unknown.messages[0].text() == "Perform ASR in xx."
    prompted = transcription_chat("lfm2", TranscriptionInput(audio=b"x", prompt="ASR, please."), max_tokens=8)
    assert prompted.messages[0].text() == "ASR, please."


# ---- the tiny Qwen2-Audio model ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def audio_engine(tiny_audio: Any) -> Iterator[Any]:
    import asyncio

    from hypnos_llama.testing_vision import make_vision_engine

    engine = make_vision_engine(tiny_audio, slots=1, model_id="tiny-audio")
    asyncio.run(engine.load(tier1(4096)))
    yield engine
    asyncio.run(engine.unload())


async def test_the_audio_model_transcribes_with_the_instruction_and_the_prompt(audio_engine: Any) -> None:
    seen: list[tuple[Any, ChatFinished]] = []
    chat = audio_engine.chat

    async def recording(request: Any, cancel: CancelToken) -> Any:
        async for event in chat(request, cancel):
            if isinstance(event, ChatFinished):
                seen.append((request, event))
            yield event

    audio_engine.chat = recording
    try:
        clip = wav()
        first = await audio_engine.transcribe(TranscriptionInput(audio=clip), CancelToken())
        again = await audio_engine.transcribe(TranscriptionInput(audio=clip), CancelToken())
        prompted = await audio_engine.transcribe(TranscriptionInput(audio=clip, prompt="Say it."), CancelToken())
    finally:
        del audio_engine.chat
    assert isinstance(first.text, str) and first.text == again.text  # greedy: the same clip, the same transcript
    assert prompted.text is not None
    (request, finished), _, (prompted_request, _) = seen
    assert request.messages[0].text() == GEMMA_INSTRUCTION and prompted_request.messages[0].text() == "Say it."
    assert finished.prompt_tokens >= 700  # whisper's 30 s window: 750 audio tokens reached the model
    assert first.timing.prefill_ms is not None


async def test_a_model_without_an_audio_projector_does_not_transcribe(tiny_vision: Any) -> None:
    from hypnos_llama.testing_vision import make_vision_engine

    seeing = make_vision_engine(tiny_vision)
    assert Modality.SPEECH_TO_TEXT not in seeing.served_modalities()
    with pytest.raises(HypnosError) as raised:
        await seeing.transcribe(TranscriptionInput(audio=wav()), CancelToken())
    assert raised.value.status == 400


def test_the_transcriptions_route_answers_with_the_audio_model(tiny_audio: Any) -> None:
    import hypnos_llama.plugin
    from hypnos.config import settings_from_mapping
    from hypnos.plugins import make_plugin_manager
    from hypnos_server.app import create_app
    from litestar.testing import TestClient

    raw = {
        "models_dir": str(tiny_audio.weights.parent),
        "models": [
            {
                "id": "tiny-audio",
                "modality": "text_generation",
                "engine": "ggml_llama",
                "slots": 1,
                "weights_path": str(tiny_audio.weights),
                "aux_path": str(tiny_audio.projector),
                "context_len": 4096,
                "llama": {"n_threads": 1},
            },
        ],
    }
    app = create_app(settings_from_mapping(raw), make_plugin_manager(autoload=False, plugins=[hypnos_llama.plugin]))
    with TestClient(app, timeout=120) as client:
        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        models = client.get("/v1/memory/status").json()["models"]
        assert "speech_to_text" in models[0]["modalities"]
        files = {"file": ("clip.wav", wav(), "audio/wav")}
        answer = client.post("/v1/audio/transcriptions", data={"model": "tiny-audio", "language": "en"}, files=files)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert isinstance(body["text"], str) and body["language"] == "en"
        assert body["duration_secs"] == pytest.approx(1.0, abs=0.01)
        assert body["hypnos_telemetry"]["engine"]["audio_secs"] == pytest.approx(1.0, abs=0.01)
