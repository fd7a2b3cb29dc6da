"""StagedEngine: load/demote/unload and their timings written once, over four blocking hooks on the model's worker."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from hypnos.engine import CancelToken, Engine, EngineContext, EngineUnavailable
from hypnos.errors import HypnosError
from hypnos.kit.thread_sessions import ThreadSessions
from hypnos.kit.worker import ModelWorker
from hypnos.types import LayerPlacementPlan, MemoryTier, TierSwitchPhases

if TYPE_CHECKING:
    from hypnos.config import ModelConfig

logger = logging.getLogger(__name__)

_DEPTH = {MemoryTier.TIER3: 0, MemoryTier.TIER2: 1, MemoryTier.TIER1: 2}


class ModelNotLoaded(HypnosError):
    """503 model_not_available: a request reached an engine whose model is not at tier 1 (one status for all)."""

    def __init__(self, model_id: str) -> None:
        super().__init__(
            503, "model_not_available", f"the model `{model_id}` is not loaded; retry shortly", retry_after=1
        )


class Cancelled(HypnosError):
    """The request was cancelled (client gone or shutdown); raised by check_cancelled() at the engine's next step."""

    def __init__(self) -> None:
        super().__init__(499, "cancelled", "the client went away")


def check_cancelled(cancel: CancelToken) -> None:
    """Raise Cancelled when the token is set: call it between steps (token, chunk, batch, page)."""
    if cancel.cancelled:
        raise Cancelled()


class StagedEngine(Engine):
    """An engine whose tier moves are four blocking hooks run on its own worker thread.

    Hooks (all run on `self.worker`, one at a time, after any request call already queued there):
      read_weights()       tier 3 -> 2: bring the weights into host RAM
      build(plan)          tier 2 -> 1: build the runnable model on the device from the RAM copy
      release_device()     tier 1 -> 2: drop the device copy, keep the warm copy
      release_warm()       tier 2 -> 3: drop the warm copy
    Set `build_consumes_warm_copy = True` when build hands the RAM copy to the library (it then no longer holds
    it): a move back to tier 2 calls read_weights() again after release_device().
    Set `options_table`/`options_type` to read the model's `[models.<table>]` Struct as `self.options`.
    """

    options_table: ClassVar[str | None] = None
    options_type: ClassVar[type[Any] | None] = None
    build_consumes_warm_copy: bool = False  # a class's default, or set by the instance from its options
    load_mode: str = "read"  # how the library reads the weights (the timing's load_mode): a default, or per instance
    # an ONNX Runtime or CTranslate2 engine's sessions per thread count (hypnos.kit.thread_sessions), set by build
    thread_sessions: ThreadSessions[Any] | None = None

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self.worker = ModelWorker(f"{model.engine}-{model.id}")
        self.device = "cpu"
        self.options: Any = (
            context.options_for(model, self.options_table, self.options_type) if self.options_table else None
        )
        self._held = 0  # how deep the hooks have brought the model: 0 nothing, 1 warm copy, 2 built (kit-private)
        self._torch_threads: int | None = None  # torch's thread count on the worker before any core share

    # ---- hooks (blocking; override) -------------------------------------------------------------------------------

    def read_weights(self) -> None:
        """Tier 3 -> 2: bring the weights into host RAM (state dicts, file bytes, pages)."""

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 2 -> 1: build the runnable model on the device from the RAM copy; set self.device."""
        raise NotImplementedError

    def release_device(self) -> None:
        """Tier 1 -> 2: drop the device copy, keep the warm copy."""

    def release_warm(self) -> None:
        """Tier 2 -> 3: drop the warm copy."""

    def build_phases(self, phases: TierSwitchPhases) -> TierSwitchPhases:
        """The phases of a load that built the model, refined by the engine (its own weights/context split,
        projector_ms, kv_restore_ms...); the kit's: weights_ms = read_weights, context_ms = build."""
        return phases

    # ---- helpers ------------------------------------------------------------------------------------------------

    def model_path(self, key: str = "weights_path", what: str | None = None, default: Path | None = None) -> Path:
        """The absolute path of one of the model's path keys (weights_path, voices_path...); `default` when unset,
        else a 503 naming `what` the path should hold when given (`a diffusers pipeline folder`)."""
        path = self.model.resolve(self.context.models_dir, getattr(self.model, key)) or default
        if path is None:
            holds = f" ({what})" if what else ""
            raise EngineUnavailable(
                f"the model `{self.model.id}` needs `{key}`{holds} for the `{self.model.engine}` engine"
            )
        return path

    async def run_blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run function(*args) on the model's worker thread (never on the event loop)."""
        return await self.worker.run(function, *args)

    async def follow_cores(self, cores: list[int], alone: bool = False) -> int | None:
        """The share's thread count reaches the engine's `thread_sessions` (its next call runs on the session made
        for the share) or torch where the engine loaded it: set on the worker thread before the next call queued
        there, never above the count torch had before (the configured one); returns that count (None without either:
        the host is pinned to the share)."""
        await super().follow_cores(cores, alone)
        threads = self.core_threads
        sessions = self.thread_sessions
        if sessions is not None and sessions.limit > 1:
            return sessions.threads(threads)
        if "torch" not in sys.modules or not self.ready or threads is None:
            return None
        self.worker.submit(self._follow_torch, threads)
        return min(threads, self._torch_threads or threads)

    def _follow_torch(self, threads: int) -> None:
        try:
            torch: Any = sys.modules["torch"]
            if self._torch_threads is None:
                self._torch_threads = int(torch.get_num_threads())
            wanted = max(1, min(threads, self._torch_threads))
            if torch.get_num_threads() != wanted:
                torch.set_num_threads(wanted)
        except Exception as error:  # a torch that refuses: the host's pinning still holds
            logger.info("torch did not take %s threads: %s", threads, error)

    @property
    def ready(self) -> bool:
        """True while the model is built (tier 1)."""
        return self._held == 2

    def require_ready(self) -> None:
        """Raise ModelNotLoaded unless the model is built; call it first in every modality method."""
        if self._held != 2:
            raise ModelNotLoaded(self.model.id)

    # ---- the lifecycle, once ------------------------------------------------------------------------------------

    async def load(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        """Bring the model to plan.primary_tier through the hooks it still needs; the phases they took."""
        phases: TierSwitchPhases = await self.worker.run(self._load_blocking, plan)
        return phases

    async def demote(self, tier: MemoryTier) -> None:
        """Move down to tier 2 or 3 through the release hooks (after any call queued on the worker)."""
        await self.worker.run(self._demote_blocking, _DEPTH[tier])

    async def unload(self) -> None:
        """Free everything (tier 3) and let the worker thread end."""
        try:
            await self.demote(MemoryTier.TIER3)
        finally:
            self.worker.close()

    def _load_blocking(self, plan: LayerPlacementPlan) -> TierSwitchPhases:
        target = _DEPTH[plan.primary_tier]
        started = time.perf_counter()
        read_ms = build_ms = 0.0
        built_now = False
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
            built_now = True
        total = (time.perf_counter() - started) * 1000
        phases = TierSwitchPhases(
            load_mode=self.load_mode,
            weights_ms=round(read_ms, 3),
            context_ms=round(build_ms, 3) if built_now else None,  # nothing was built on a move to tier 2
            total_ms=round(total, 3),
        )
        return self.build_phases(phases) if built_now else phases

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
