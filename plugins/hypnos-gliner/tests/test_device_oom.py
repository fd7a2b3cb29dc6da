"""507 from GLiNER: the tiny model (torch) in its engine host, torch raising torch.OutOfMemoryError from the model
call: the idle model is evicted and the call retried once; a second failure is 507 device_out_of_memory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypnos.engine import DeviceOutOfMemory, EntityInput
from hypnos.scheduler import Scheduler
from hypnos.testing.device_oom import failing_scheduler, load_idle
from hypnos.types import MemoryTier, Modality
from hypnos_gliner.testing import TINY_NAME, model_table

HERE = Path(__file__).parent / "oom"
JOB = EntityInput(texts=["Ada Lovelace was born in London."], labels=["person", "city"])


def scheduler_for(models_dir: Path, ooms: int) -> Scheduler:
    """The tiny GLiNER on torch, failing `ooms` times in its host, beside an idle fake model."""
    sys.path.insert(0, str(HERE))
    from oom_gliner import OomGliner

    return failing_scheduler(models_dir, model_table(runtime="torch", slots=1), OomGliner, ooms, HERE)


async def extract(scheduler: Scheduler) -> tuple[object, list[str]]:
    """One extraction through the lease as the route makes it (retried once after an OOM)."""
    await load_idle(scheduler)
    async with scheduler.lease(TINY_NAME, Modality.ENTITY_EXTRACTION) as lease:
        result = await lease.run_with_oom_retry(lambda engine: engine.extract_entities(JOB, lease.cancel))
        return result, lease.evicted_models


async def test_a_torch_oom_in_the_host_evicts_the_idle_model_and_the_retry_answers(models_dir: Path) -> None:
    scheduler = scheduler_for(models_dir, ooms=1)
    try:
        result, evicted = await extract(scheduler)
        assert len(result.entities) == 1 and evicted == ["idle"]  # type: ignore[attr-defined]
        assert scheduler.get("idle").tier != MemoryTier.TIER1
        assert [e.reason for e in scheduler.recent_evictions] == ["device_out_of_memory"]
    finally:
        await scheduler.shutdown()


async def test_a_torch_oom_again_after_the_evictions_is_507(models_dir: Path) -> None:
    scheduler = scheduler_for(models_dir, ooms=2)
    try:
        with pytest.raises(DeviceOutOfMemory) as caught:
            await extract(scheduler)
        assert (caught.value.status, caught.value.type) == (507, "device_out_of_memory")
        assert "CUDA out of memory" in caught.value.message
    finally:
        await scheduler.shutdown()
