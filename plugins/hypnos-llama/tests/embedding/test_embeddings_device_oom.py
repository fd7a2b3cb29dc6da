"""507 from the llama.cpp embeddings: llama-cpp-python raising its own RuntimeError("llama_decode returned -2") in
the engine host evicts the idle model and the batch is retried once; twice is 507 device_out_of_memory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypnos.engine import DeviceOutOfMemory
from hypnos.scheduler import Scheduler
from hypnos.testing.device_oom import failing_scheduler, load_idle
from hypnos.types import Modality

HERE = Path(__file__).parent.parent / "oom"


def embedding_scheduler(minilm_models_dir: tuple[Path, dict[str, Any]], ooms: int) -> Scheduler:
    """The starter MiniLM failing `ooms` decodes in its host, beside an idle fake model."""
    sys.path.insert(0, str(HERE))
    from oom_llama import OomLlamaEmbedding

    models_dir, table = minilm_models_dir
    return failing_scheduler(models_dir, table, OomLlamaEmbedding, ooms, HERE)


async def embed(scheduler: Scheduler, model_id: str) -> tuple[Any, list[str]]:
    """Two inputs embedded through the lease (retried once after an OOM)."""
    await load_idle(scheduler)
    async with scheduler.lease(model_id, Modality.EMBEDDINGS) as lease:
        result = await lease.run_with_oom_retry(lambda engine: engine.embed(["a cat", "a dog"], lease.cancel))
        return result, lease.evicted_models


async def test_a_failed_decode_allocation_evicts_the_idle_model_and_the_retry_embeds(
    minilm_models_dir: tuple[Path, dict[str, Any]],
) -> None:
    scheduler = embedding_scheduler(minilm_models_dir, ooms=1)
    try:
        result, evicted = await embed(scheduler, minilm_models_dir[1]["id"])
        assert len(result.vectors) == 2 and evicted == ["idle"]
    finally:
        await scheduler.shutdown()


async def test_a_failed_decode_allocation_again_is_507(minilm_models_dir: tuple[Path, dict[str, Any]]) -> None:
    scheduler = embedding_scheduler(minilm_models_dir, ooms=2)
    try:
        with pytest.raises(DeviceOutOfMemory) as caught:
            await embed(scheduler, minilm_models_dir[1]["id"])
        assert (caught.value.status, caught.value.type) == (507, "device_out_of_memory")
    finally:
        await scheduler.shutdown()
