"""GLiNER (torch runtime) whose model call fails with torch.OutOfMemoryError, torch's own type, the first calls.
Imported in the engine host (PYTHONPATH names this folder)."""

from __future__ import annotations

from hypnos.testing.device_oom import Failing
from hypnos.types import LayerPlacementPlan, TierSwitchPhases
from hypnos_gliner.engine import GlinerEngine


def torch_oom() -> BaseException:
    """What torch raises when CUDA cannot allocate."""
    import torch

    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.11 GiB total capacity)")


class OomGliner(GlinerEngine):
    """GLiNER whose built model runs out of device memory (after the load)."""

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        phases = await super().load(plan)
        self._runner = Failing(self._runner, "run", torch_oom)
        return phases
