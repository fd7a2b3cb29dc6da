"""llama.cpp whose llama_decode answers -2 (GGML_STATUS_ALLOC_FAILED: it could not allocate) the first calls after
the load, as the library does when the device is full: the chat batch loop reads the status, llama-cpp-python raises
its own RuntimeError("llama_decode returned -2") for the embeddings. Imported in the engine host (PYTHONPATH)."""

from __future__ import annotations

import os
from typing import Any

from hypnos.testing.device_oom import OOM_TIMES_ENV
from hypnos.types import LayerPlacementPlan, TierSwitchPhases
from hypnos_llama.embedding.engine import LlamaEmbeddingEngine
from hypnos_llama.engine import LlamaEngine

ALLOC_FAILED = -2


def fail_decodes() -> None:
    """From now on llama_decode returns -2 the first OOM_TIMES_ENV calls (in both modules that call it)."""
    import llama_cpp
    import llama_cpp.llama_cpp as bindings

    real = bindings.llama_decode
    left = [int(os.environ.get(OOM_TIMES_ENV, "1"))]

    def llama_decode(*args: Any) -> int:
        if left[0] > 0:
            left[0] -= 1
            return ALLOC_FAILED
        return real(*args)

    llama_cpp.llama_decode = bindings.llama_decode = llama_decode


class OomLlama(LlamaEngine):
    """A chat model whose decodes fail to allocate after its load."""

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        phases = await super().load(plan)
        fail_decodes()
        return phases


class OomLlamaEmbedding(LlamaEmbeddingEngine):
    """An embedding model whose decodes fail to allocate after its load."""

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        phases = await super().load(plan)
        fail_decodes()
        return phases
