"""507 from llama.cpp: llama_decode failing to allocate (status -2) in the engine host, for a chat (whole and
streamed: before its first token) and for embeddings (llama-cpp-python's own RuntimeError): the idle model is
evicted and the call retried once; twice is 507 device_out_of_memory (both were 500 before)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypnos.engine import DeviceOutOfMemory
from hypnos.scheduler import Lease, Scheduler
from hypnos.testing.device_oom import failing_scheduler, load_idle
from hypnos.types import MemoryTier, Modality
from hypnos_llama.testing import chat_request

HERE = Path(__file__).parent / "oom"


def chat_scheduler(tiny_gguf: Path, ooms: int) -> Scheduler:
    """The tiny llama chat model failing `ooms` decodes in its host, beside an idle fake model."""
    sys.path.insert(0, str(HERE))
    from oom_llama import OomLlama

    table = {"id": "tiny", "modality": "text_generation", "engine": "ggml_llama", "weights_path": str(tiny_gguf)}
    table |= {"context_len": 512, "slots": 1, "llama": {"n_threads": 1}}
    return failing_scheduler(tiny_gguf.parent, table, OomLlama, ooms, HERE)


async def whole(lease: Lease) -> str:
    """A whole chat's text, retried once after an OOM."""

    async def answer(engine: Any) -> str:
        events = engine.chat(chat_request("the capital of France is", max_tokens=4), lease.cancel)
        return "".join([getattr(event, "text", "") async for event in events])

    return await lease.run_with_oom_retry(answer)


async def streamed(lease: Lease) -> str:
    """A streamed chat's text: started again after an OOM before its first event."""
    request = chat_request("the capital of France is", max_tokens=4)
    events, first = await lease.first_with_oom_retry(lambda engine: engine.chat(request, lease.cancel))
    return "".join([getattr(event, "text", "") for event in [first, *[e async for e in events]]])


@pytest.mark.parametrize("run", [whole, streamed], ids=["whole", "streamed"])
async def test_a_failed_decode_allocation_evicts_the_idle_model_and_the_retry_answers(tiny_gguf: Path, run) -> None:  # type: ignore[no-untyped-def]
    scheduler = chat_scheduler(tiny_gguf, ooms=1)
    try:
        await load_idle(scheduler)
        async with scheduler.lease("tiny", Modality.TEXT_GENERATION) as lease:
            text = await run(lease)
        assert text and lease.evicted_models == ["idle"]
        assert scheduler.get("idle").tier != MemoryTier.TIER1
        assert [e.reason for e in scheduler.recent_evictions] == ["device_out_of_memory"]
    finally:
        await scheduler.shutdown()


@pytest.mark.parametrize("run", [whole, streamed], ids=["whole", "streamed"])
async def test_a_failed_decode_allocation_again_is_507(tiny_gguf: Path, run) -> None:  # type: ignore[no-untyped-def]
    scheduler = chat_scheduler(tiny_gguf, ooms=2)
    try:
        await load_idle(scheduler)
        async with scheduler.lease("tiny", Modality.TEXT_GENERATION) as lease:
            with pytest.raises(DeviceOutOfMemory) as caught:
                await run(lease)
        assert (caught.value.status, caught.value.type) == (507, "device_out_of_memory")
    finally:
        await scheduler.shutdown()
