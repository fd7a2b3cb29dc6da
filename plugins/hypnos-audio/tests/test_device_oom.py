"""507 from the speech engines: Kokoro, Piper and whisper in their engine hosts, their library failing to allocate
device memory (ONNX Runtime's RuntimeException, CTranslate2's RuntimeError, raised at the library's own call sites):
the idle models are evicted and the call retried once; a second failure is 507 device_out_of_memory."""

from __future__ import annotations

import io
import math
import struct
import sys
import wave
from pathlib import Path
from typing import Any

import pytest
from hypnos.engine import DeviceOutOfMemory, SpeechInput, TranscriptionInput
from hypnos.scheduler import Scheduler
from hypnos.testing.device_oom import failing_scheduler, load_idle
from hypnos.types import MemoryTier, Modality

pytestmark = pytest.mark.model

HERE = Path(__file__).parent / "oom"
ENGINES = {"kokoro-82m": "OomKokoro", "piper-joe": "OomPiper", "whisper-tiny.en": "OomWhisper"}


def scheduler_for(starter_tables: tuple[Path, list[dict[str, Any]]], model_id: str, ooms: int) -> Scheduler:
    """The starter model, served by its failing subclass in a host, beside an idle fake model."""
    sys.path.insert(0, str(HERE))
    import oom_engines

    models_dir, tables = starter_tables
    table = next(t for t in tables if t["id"] == model_id)
    return failing_scheduler(models_dir, table, getattr(oom_engines, ENGINES[model_id]), ooms, HERE)


def tone_wav(seconds: float = 1.0, rate: int = 16000) -> bytes:
    """A WAV of a plain tone (whisper hears nothing in it; the call is what matters)."""
    frames = b"".join(struct.pack("<h", int(8000 * math.sin(i / 8))) for i in range(int(seconds * rate)))
    out = io.BytesIO()
    with wave.open(out, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(frames)
    return out.getvalue()


async def serve(scheduler: Scheduler, model_id: str) -> tuple[Any, list[str]]:
    """One request through the lease as the routes make it (retried once after an OOM): its result, the evictions."""
    await load_idle(scheduler)
    if model_id == "whisper-tiny.en":
        async with scheduler.lease(model_id, Modality.SPEECH_TO_TEXT) as lease:
            job = TranscriptionInput(audio=tone_wav(), language="en")
            result = await lease.run_with_oom_retry(lambda engine: engine.transcribe(job, lease.cancel))
            return result, lease.evicted_models
    async with scheduler.lease(model_id, Modality.TEXT_TO_SPEECH) as lease:
        voices = lease.engine.capabilities().voices or ["joe"]
        speech = SpeechInput(text="Good morning.", voice=voices[0])
        events, first = await lease.first_with_oom_retry(lambda engine: engine.speak(speech, lease.cancel))
        chunks = [first, *[chunk async for chunk in events]]
        return chunks, lease.evicted_models


@pytest.mark.parametrize("model_id", list(ENGINES))
async def test_a_device_oom_in_the_host_evicts_the_idle_model_and_the_retry_answers(
    starter_tables: tuple[Path, list[dict[str, Any]]], model_id: str
) -> None:
    scheduler = scheduler_for(starter_tables, model_id, ooms=1)
    try:
        result, evicted = await serve(scheduler, model_id)
        assert result is not None and evicted == ["idle"]
        assert scheduler.get("idle").tier != MemoryTier.TIER1
        assert [e.reason for e in scheduler.recent_evictions] == ["device_out_of_memory"]
    finally:
        await scheduler.shutdown()


@pytest.mark.parametrize("model_id", list(ENGINES))
async def test_a_device_oom_again_after_the_evictions_is_507(
    starter_tables: tuple[Path, list[dict[str, Any]]], model_id: str
) -> None:
    scheduler = scheduler_for(starter_tables, model_id, ooms=2)
    try:
        with pytest.raises(DeviceOutOfMemory) as caught:
            await serve(scheduler, model_id)
        assert (caught.value.status, caught.value.type) == (507, "device_out_of_memory")
        assert "out of device memory" in caught.value.message
    finally:
        await scheduler.shutdown()
