"""507 from docling: its OCR (RapidOCR on ONNX Runtime) in the engine host raising ONNX Runtime's RuntimeException
for a failed allocation: the idle model is evicted and the conversion retried once; twice is 507
device_out_of_memory."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from hypnos.engine import DeviceOutOfMemory, DocumentInput
from hypnos.scheduler import Scheduler
from hypnos.testing.device_oom import failing_scheduler, load_idle
from hypnos.types import MemoryTier, Modality

HERE = Path(__file__).parent / "oom"
TABLE = {"id": "docling", "modality": "document_conversion", "engine": "docling"}


def picture() -> bytes:
    """A PNG with a word drawn in it (what OCR reads)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (240, 80), "white")
    ImageDraw.Draw(image).text((20, 30), "HELLO WORLD", fill="black")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def scheduler_for(models_dir: Path, ooms: int) -> Scheduler:
    """docling with failing OCR in its host, beside an idle fake model."""
    sys.path.insert(0, str(HERE))
    from oom_docling import OomDocling

    return failing_scheduler(models_dir, TABLE, OomDocling, ooms, HERE)


async def convert(scheduler: Scheduler) -> tuple[list[object], list[str]]:
    """One whole conversion through the lease, as the route makes it (retried once after an OOM)."""
    await load_idle(scheduler)
    job = DocumentInput(data=picture(), filename="words.png", ocr=True)
    async with scheduler.lease("docling", Modality.DOCUMENT_CONVERSION) as lease:

        async def whole(engine: object) -> list[object]:
            return [event async for event in engine.convert_document(job, lease.cancel)]  # type: ignore[attr-defined]

        events = await lease.run_with_oom_retry(whole)
        return events, lease.evicted_models


async def test_an_ocr_oom_in_the_host_evicts_the_idle_model_and_the_retry_converts(tmp_path: Path) -> None:
    scheduler = scheduler_for(tmp_path, ooms=1)
    try:
        events, evicted = await convert(scheduler)
        assert len(events) == 2 and evicted == ["idle"]  # DocumentStarted, PageDone
        assert scheduler.get("idle").tier != MemoryTier.TIER1
        assert [e.reason for e in scheduler.recent_evictions] == ["device_out_of_memory"]
    finally:
        await scheduler.shutdown()


async def test_an_ocr_oom_again_after_the_evictions_is_507(tmp_path: Path) -> None:
    scheduler = scheduler_for(tmp_path, ooms=2)
    try:
        with pytest.raises(DeviceOutOfMemory) as caught:
            await convert(scheduler)
        assert (caught.value.status, caught.value.type) == (507, "device_out_of_memory")
    finally:
        await scheduler.shutdown()
