"""Stand-in for hypnos.kit.staged.StagedEngine until the kit lands in core (same hooks, same semantics)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from hypnos.config import ModelConfig
from hypnos.engine import CancelToken, Engine, EngineContext
from hypnos.errors import HypnosError
from hypnos.types import LayerPlacementPlan, MemoryTier, TierSwitchPhases

_DEPTH = {MemoryTier.TIER3: 0, MemoryTier.TIER2: 1, MemoryTier.TIER1: 2}


class Cancelled(HypnosError):
    """499 cancelled: the client went away; raised at the engine's next step."""

    def __init__(self) -> None:
        super().__init__(499, "cancelled", "the client went away")


def check_cancelled(cancel: CancelToken) -> None:
    """Raise Cancelled when the token is set."""
    if cancel.cancelled:
        raise Cancelled()


class StagedEngine(Engine):
    """load/demote/unload over four blocking hooks run on the model's own worker thread."""

    build_consumes_warm_copy: ClassVar[bool] = False
    load_mode: ClassVar[str] = "read"

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self._pool: ThreadPoolExecutor | None = None
        self.device = "cpu"
        self._held = 0

    def read_weights(self) -> None:
        """Tier 3 -> 2."""

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 2 -> 1."""
        raise NotImplementedError

    def release_device(self) -> None:
        """Tier 1 -> 2."""

    def release_warm(self) -> None:
        """Tier 2 -> 3."""

    async def run_blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run function(*args) on the model's worker thread."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"diffusers-{self.model.id}")
        return await asyncio.get_running_loop().run_in_executor(self._pool, function, *args)

    def require_ready(self) -> None:
        """503 model_not_available unless built."""
        if self._held != 2:
            raise HypnosError(503, "model_not_available", f"the model `{self.model.id}` is not loaded")

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        """Bring the model to plan.primary_tier."""
        return await self.run_blocking(self._load_blocking, plan)

    async def demote(self, tier: MemoryTier) -> None:
        """Move down to tier 2 or 3."""
        await self.run_blocking(self._demote_blocking, _DEPTH[tier])

    async def unload(self) -> None:
        """Free everything."""
        try:
            await self.demote(MemoryTier.TIER3)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def _load_blocking(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        target = _DEPTH[plan.primary_tier]
        started = time.perf_counter()
        read_ms = build_ms = 0.0
        if target < self._held:
            self._demote_blocking(target)
        if target >= 1 and self._held == 0:
            self.read_weights()
            self._held = 1
            read_ms = (time.perf_counter() - started) * 1000
        if target == 2 and self._held == 1:
            built = time.perf_counter()
            self.build(plan)
            self._held = 2
            build_ms = (time.perf_counter() - built) * 1000
        total = (time.perf_counter() - started) * 1000
        return TierSwitchPhases(
            load_mode=self.load_mode, weights_ms=round(read_ms, 3), context_ms=round(build_ms, 3),
            total_ms=round(total, 3),
        )  # fmt: skip

    def _demote_blocking(self, target: int) -> None:
        if self._held == 2 and target < 2:
            self._held = 1
            try:
                self.release_device()
            finally:
                self.device = "cpu"
            if target == 1 and self.build_consumes_warm_copy:
                self.read_weights()
        if self._held == 1 and target == 0:
            self._held = 0
            self.release_warm()
