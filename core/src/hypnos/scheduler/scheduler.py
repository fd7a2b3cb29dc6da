"""The scheduler: the only way to use a model is `async with scheduler.lease(...)`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from hypnos.config import ModelConfig, Settings
from hypnos.engine import Engine, EngineContext, EngineKind, EngineUnavailable, MemoryEstimate
from hypnos.errors import HypnosError, invalid_request, model_busy, model_disabled, model_not_found, server_error
from hypnos.scheduler.lease import Lease
from hypnos.types import LayerPlacementPlan, MemoryTier, Modality

logger = logging.getLogger(__name__)


@dataclass
class ModelState:
    """Everything the scheduler tracks about one configured model."""

    config: ModelConfig
    engine: Engine | None
    unavailable_reason: str | None = None
    enabled: bool = True
    tier: MemoryTier = MemoryTier.TIER3
    placement: LayerPlacementPlan = field(default_factory=LayerPlacementPlan)
    active_leases: int = 0
    waiting: int = 0
    total_requests_served: int = 0
    service_ms_total: float = 0.0
    last_used: float = 0.0
    slots: asyncio.Semaphore | None = None
    load_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    estimate_cache: MemoryEstimate | None = None

    @property
    def id(self) -> str:
        """The model's id."""
        return self.config.id

    @property
    def service_ms(self) -> float | None:
        """Average time a request held the model, once measured."""
        if not self.total_requests_served:
            return None
        return self.service_ms_total / self.total_requests_served


class Scheduler:
    """Owns every model's engine and placement; admits, loads and releases through leases."""

    def __init__(self, settings: Settings, engine_kinds: dict[str, EngineKind]) -> None:
        self.settings = settings
        self.engine_kinds = engine_kinds
        self.ready = False
        self.context = EngineContext(models_dir=settings.models_path, limits=settings.limits)
        self._models: dict[str, ModelState] = {}
        for model in settings.models:
            self._models[model.id] = self._make_state(model)

    def _make_state(self, model: ModelConfig) -> ModelState:
        kind = self.engine_kinds.get(model.engine)
        if kind is None:
            reason = f"the engine kind `{model.engine}` of model `{model.id}` is not installed"
            return ModelState(config=model, engine=None, unavailable_reason=reason, enabled=model.enabled)
        try:
            engine = kind.factory(model, self.context)
        except HypnosError as error:
            return ModelState(config=model, engine=None, unavailable_reason=error.message, enabled=model.enabled)
        return ModelState(config=model, engine=engine, enabled=model.enabled)

    # ---- queries ------------------------------------------------------------------------------------------------

    def models(self) -> list[ModelState]:
        """Every configured model, in config order."""
        return list(self._models.values())

    def get(self, model_id: str) -> ModelState:
        """The state of one model, or 404 model_not_found."""
        state = self._models.get(model_id)
        if state is None:
            raise model_not_found(model_id)
        return state

    def serving(self, model_id: str, modality: Modality) -> ModelState:
        """The model, checked: known, enabled, installed and serving the modality."""
        state = self.get(model_id)
        if not state.enabled:
            raise model_disabled(model_id)
        if modality not in state.config.all_modalities:
            raise invalid_request(f"the model `{model_id}` does not serve {modality.value}")
        if state.engine is None:
            raise EngineUnavailable(state.unavailable_reason or f"the model `{model_id}` cannot be served")
        return state

    # ---- leases -------------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def lease(
        self,
        model_id: str,
        modality: Modality,
        *,
        deadline_ms: int | None = None,
        next_model: str | None = None,
    ) -> AsyncIterator[Lease]:
        """Admit, promote to tier 1 if needed, and hold the model until the block ends."""
        state = self.serving(model_id, modality)
        if state.slots is None:
            state.slots = asyncio.Semaphore(max(1, state.config.slots))
        if state.slots.locked() and state.waiting >= self.settings.limits.max_queue_per_model:
            raise model_busy(f"the model `{model_id}` has {state.waiting} requests queued (limits.max_queue_per_model)")
        arrived = time.perf_counter()
        state.waiting += 1
        try:
            await state.slots.acquire()
        finally:
            state.waiting -= 1
        try:
            state.active_leases += 1
            previous = state.tier
            switch_started = time.perf_counter()
            phases = await self._ensure_loaded(state)
            switched = (time.perf_counter() - switch_started) * 1000 if phases is not None else 0.0
            lease = Lease(
                model_id=model_id,
                engine=state.engine,  # type: ignore[arg-type]
                previous_tier=previous,
                placement=state.placement,
                tier_switch_latency_ms=switched,
                tier_switch_phases=phases,
                queue_ms=(switch_started - arrived) * 1000,
            )
            held_from = time.perf_counter()
            try:
                yield lease
            finally:
                state.total_requests_served += 1
                state.service_ms_total += (time.perf_counter() - held_from) * 1000
                state.last_used = time.monotonic()
        finally:
            state.active_leases -= 1
            state.slots.release()

    async def _ensure_loaded(self, state: ModelState):  # type: ignore[no-untyped-def]
        if state.tier == MemoryTier.TIER1:
            return None
        async with state.load_lock:
            if state.tier == MemoryTier.TIER1:
                return None
            return await self._load(state, MemoryTier.TIER1)

    async def _load(self, state: ModelState, tier: MemoryTier):  # type: ignore[no-untyped-def]
        assert state.engine is not None
        estimate = state.estimate_cache or state.engine.estimate()
        state.estimate_cache = estimate
        context_len = state.config.context_len or estimate.default_context_len
        plan = LayerPlacementPlan(
            primary_tier=tier,
            gpu_layers=estimate.num_layers if tier == MemoryTier.TIER1 else 0,
            pinned_ram_layers=estimate.num_layers if tier == MemoryTier.TIER2 else 0,
            vram_weight_bytes=estimate.weight_bytes if tier == MemoryTier.TIER1 else 0,
            vram_kv_and_workspace_bytes=(estimate.kv_bytes_per_token * context_len + estimate.workspace_bytes)
            if tier == MemoryTier.TIER1
            else 0,
            pinned_ram_bytes=estimate.weight_bytes if tier == MemoryTier.TIER2 else 0,
            allocated_context_len=context_len if tier == MemoryTier.TIER1 else 0,
        )
        try:
            phases = await state.engine.load(plan)
        except HypnosError:
            await self._reset(state)
            raise
        except Exception as error:
            logger.exception("loading %s failed", state.id)
            await self._reset(state)
            raise server_error(f"loading the model `{state.id}` failed: {error}") from error
        state.tier = tier
        state.placement = plan
        return phases

    async def _reset(self, state: ModelState) -> None:
        try:
            if state.engine is not None:
                await state.engine.unload()
        except Exception:
            logger.exception("unloading %s after a failed load failed", state.id)
        state.tier = MemoryTier.TIER3
        state.placement = LayerPlacementPlan()

    # ---- lifecycle ----------------------------------------------------------------------------------------------

    async def stage_startup(self) -> None:
        """Load every enabled model whose initial_tier is tier 1 or 2, then flip `ready`."""
        try:
            for state in self.models():
                if not state.enabled or state.engine is None or state.config.initial_tier == MemoryTier.TIER3:
                    continue
                try:
                    async with state.load_lock:
                        await self._load(state, state.config.initial_tier)
                except Exception as error:  # staging continues with the other models
                    logger.error("staging %s failed: %s", state.id, error)
        finally:
            self.ready = True

    async def shutdown(self) -> None:
        """Unload every model."""
        for state in self.models():
            if state.engine is not None and state.tier != MemoryTier.TIER3:
                try:
                    await state.engine.unload()
                except Exception:
                    logger.exception("unloading %s at shutdown failed", state.id)
                state.tier = MemoryTier.TIER3
