"""The scheduler: the only way to use a model is `async with scheduler.lease(...)`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import msgspec

from hypnos.config import ModelConfig, PromptCacheConfig, Settings
from hypnos.engine import Engine, EngineContext, EngineKind, EngineUnavailable
from hypnos.errors import HypnosError, invalid_request, model_busy, model_disabled, model_not_found
from hypnos.hardware import HardwareProbe, SystemHardware
from hypnos.hosting import HostedEngine, host_factory_path
from hypnos.options import decode_engine_options
from hypnos.scheduler.admission import (
    deadline_unmeetable,
    effective_deadline_ms,
    estimated_wait_ms,
    implicit_deadline_ms,
)
from hypnos.scheduler.budgets import compute_budgets
from hypnos.scheduler.core_shares import CoreShares
from hypnos.scheduler.kv_park import KvParkStore
from hypnos.scheduler.lease import Lease
from hypnos.scheduler.lease_context import LeaseContext
from hypnos.scheduler.load_backoff import backoff_left, forget_load_failures, refuse_while_backing_off
from hypnos.scheduler.measure_store import MeasuredStore, measured_path
from hypnos.scheduler.model_state import ModelState, failure_reason
from hypnos.scheduler.pool_changes import PoolChanges
from hypnos.scheduler.prompt_cache import PromptCacheStore
from hypnos.scheduler.records import EvictionRecord, SchedulerCounters
from hypnos.scheduler.status import build_status
from hypnos.scheduler.status_types import MemoryStatus
from hypnos.scheduler.stopping import end_in_flight, shutting_down, unload_all
from hypnos.scheduler.tiers import TierManager
from hypnos.types import MemoryTier, Modality, MoeOffload

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Scheduler:
    """Owns every model's engine and placement; admits, loads, evicts and releases through leases."""

    def __init__(
        self,
        settings: Settings,
        engine_kinds: dict[str, EngineKind],
        *,
        hardware: HardwareProbe | None = None,
        clock: Callable[[], float] = time.monotonic,
        latency_provider: Callable[[], Any] | None = None,
    ) -> None:
        self.settings = settings
        self.engine_kinds = engine_kinds
        self.ready = False
        self.clock = clock
        self.hardware: HardwareProbe = hardware or SystemHardware(settings.hardware)
        self.budgets = compute_budgets(settings.hardware, self.hardware.info())
        self.kv_park = KvParkStore(settings.hardware.kv_park, clock=clock)
        data = settings.data_path
        self.prompt_cache = PromptCacheStore(data / "prompt-cache" if data else None, self._prompt_cache_config)
        self.kv_park.attach_prompt_cache(self.prompt_cache)
        self.context = EngineContext(
            models_dir=settings.models_path,
            limits=settings.limits,
            accelerator=self.hardware.info().accelerator,
            kv_park=self.kv_park,
            prompt_cache=self.prompt_cache,
            context_resized=self.context_resized,
            kv_idle_timeout_secs=settings.server.kv_idle_timeout_secs,
        )
        self.latency_provider = latency_provider
        self._implicit_deadline = implicit_deadline_ms(settings.server, settings.limits)
        self._background: set[asyncio.Task[Any]] = set()
        self.stopping = False  # set when the server stops: no new leases
        self.live_leases: set[Lease] = set()  # the leases in flight (ended at shutdown when the grace runs short)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop serving the scheduler (set when staging)
        self._models: dict[str, ModelState] = {}
        cores = self.hardware.cpu_cores() if settings.hardware.share_cores else []
        self.cores = CoreShares(cores, self._models)  # shared out while models compute ([]: no shares)
        self.context.threads_changed = self.cores.threads_changed
        self.measured = MeasuredStore(measured_path(settings.source))
        for model in settings.models:
            self._models[model.id] = self._make_state(model)
        self.tiers = TierManager(
            self._models, settings, self.budgets, self.hardware, clock, self.kv_park, measured=self.measured
        )
        self.pool = PoolChanges(self._models, self.tiers, self.kv_park, self._make_state)

    def _prompt_cache_config(self, model_id: str) -> PromptCacheConfig | None:
        """A model's [models.prompt_cache] (None: not in the pool), for the prompt cache store."""
        state = self._models.get(model_id)
        return state.config.prompt_cache if state is not None else None

    def _make_state(self, model: ModelConfig) -> ModelState:
        """The model's state, its slot gate keeping server.batch_reserved_slots from batch lines while interactive
        requests use it."""
        state = self._new_state(model)
        server = self.settings.server
        state.gate.reserve = server.batch_reserved_slots
        state.gate.reserving = lambda: state.in_interactive_use(self.clock(), server.batch_interactive_secs)
        return state

    def _new_state(self, model: ModelConfig) -> ModelState:
        """The model's state; an engine whose options, factory or estimate fail leaves the model unavailable
        (with the reason /v1/memory/status shows) instead of stopping the server. Bad options are a ConfigError."""
        kind = self.engine_kinds.get(model.engine)
        if kind is None:
            reason = f"the engine kind `{model.engine}` of model `{model.id}` is not installed"
            return ModelState(config=model, engine=None, unavailable_reason=reason, enabled=model.enabled)
        source = self.settings.source or "<config>"
        self.context.options[model.id] = decode_engine_options(model, kind, source)
        try:
            engine = self._make_engine(model, kind)
            estimate = engine.estimate()
            modalities = list(engine.served_modalities())
        except Exception as error:
            reason = error.message if isinstance(error, HypnosError) else failure_reason(model, error)
            logger.warning("model %s is unavailable: %s", model.id, reason)
            return ModelState(
                config=model, engine=None, unavailable_reason=reason[:500], enabled=model.enabled, kind=kind
            )
        return ModelState(
            config=model,
            engine=engine,
            enabled=model.enabled,
            estimate_cache=estimate,
            estimate_ratio=self.measured.ratio(model.id, estimate),  # what earlier loads measured
            modalities=modalities,
            kind=kind,
        )

    def _make_engine(self, model: ModelConfig, kind: EngineKind) -> Engine:
        """The model's engine: in a host process of its own with isolation "process" (when the kind's factory can be
        imported there), else in this process."""
        isolation = model.isolation or self.settings.server.isolation
        path = host_factory_path(kind.factory) if isolation == "process" else None
        if isolation == "process" and path is None:
            logger.info("model %s runs in the server process: a host cannot import its engine factory", model.id)
        if path is None:
            return kind.factory(model, self.context)
        return HostedEngine(model, self.context, kind, path, on_exit=self.engine_host_exited)

    def engine_host_exited(self, model_id: str, reason: str, exhausted: bool) -> None:
        """A model's engine host died on its own: the model drops to tier 3 (its requests already failed); the next
        request starts a new host, unless the crashes were too many (then it waits for an admin's enable)."""
        state = self._models.get(model_id)
        if state is None:
            return
        if exhausted:
            logger.error("model %s stays unavailable after repeated engine crashes (enable it to retry)", model_id)
        if state.transition is None:  # a load or demotion in progress fails by itself and cleans up
            self.tiers.drop_to_tier3(state)

    # ---- queries ------------------------------------------------------------------------------------------------

    @property
    def counters(self) -> SchedulerCounters:
        """Promotions, evictions, load failures and rejected admissions so far."""
        return self.tiers.counters

    @property
    def recent_evictions(self) -> list[EvictionRecord]:
        """The last automatic evictions, newest first."""
        return list(reversed(self.tiers.recent_evictions))

    def models(self) -> list[ModelState]:
        """Every model of the pool, in config order (added ones last)."""
        return list(self._models.values())

    def get(self, model_id: str) -> ModelState:
        """The state of one model, or 404 model_not_found."""
        state = self._models.get(model_id)
        if state is None:
            raise model_not_found(model_id)
        return state

    def serving(self, model_id: str, *modalities: Modality, owner: str | None = None) -> ModelState:
        """The model, checked: known, enabled, installed and serving every one of the modalities; `owner` (a key's
        label) refused with 429 while its requests keep ending the model's engine host."""
        if self.stopping:
            raise shutting_down()
        state = self.get(model_id)
        if not state.enabled:
            raise model_disabled(model_id)
        for modality in modalities:
            if modality not in state.modalities:
                raise invalid_request(f"the model `{model_id}` does not serve {modality.value}")
        if state.engine is None:
            raise EngineUnavailable(state.unavailable_reason or f"the model `{model_id}` cannot be served")
        if isinstance(state.engine, HostedEngine) and (refusal := state.engine.refusal(owner)) is not None:
            raise refusal
        if isinstance(state.engine, HostedEngine) and state.engine.quarantined:
            raise EngineUnavailable(
                f"the model `{model_id}` is unavailable after repeated engine crashes ({state.engine.last_exit}); "
                f"an admin's POST /v1/models/{model_id}/enable lets it start again"
            )
        refuse_while_backing_off(state, self.clock())  # its last load failed: 503 until the backoff ends
        return state

    def estimated_wait_ms(self, model_id: str) -> int | None:
        """What a new request for the model would wait now (None: busy and never measured)."""
        return estimated_wait_ms(self.get(model_id), self.budgets)

    def status(self, latency: Callable[[], Any] | None = None) -> MemoryStatus:
        """The GET /v1/memory/status snapshot; `latency` (or the scheduler's provider) fills the latency field."""
        provider = latency or self.latency_provider
        with self.kv_park.lock:  # the parked bytes in tier 2 and in kv_park are the same snapshot
            return build_status(
                self._models.values(),
                self.tiers,
                self.settings,
                self.clock(),
                kv_park=self.kv_park.status(),
                prompt_cache=self.prompt_cache.status(),
                cpu_cores=self.cores.cores,
                latency=provider() if provider is not None else msgspec.UNSET,
            )

    # ---- leases -------------------------------------------------------------------------------------------------

    def lease(
        self,
        model_id: str,
        modality: Modality | Iterable[Modality],
        *,
        deadline_ms: int | None = None,
        next_model: str | None = None,
        priority: int = 0,
    ) -> LeaseContext:
        """Admit (429 / 503 / 404), promote to tier 1 if needed, and hold the model until the block ends.

        `modality` is every modality the request needs (a chat with an image and an audio part needs three): the
        model must serve each one. `priority` below 0 (a batch line): only a slot no interactive request waits
        for, given back (the lease's cancel, `yielded` set) as soon as one waits."""
        modalities = (modality,) if isinstance(modality, Modality) else tuple(dict.fromkeys(modality))
        if not modalities:
            raise ValueError("a lease needs at least one modality")
        return LeaseContext(self, model_id, modalities, deadline_ms, next_model, priority)

    def admit(self, state: ModelState, deadline_ms: int | None, priority: int = 0) -> int | None:
        """Refuse at once (429 queue full, 503 deadline) or count the request; returns the estimated wait (low-priority
        work queued or holding yieldable slots is not counted ahead of a higher priority)."""
        gate = state.gate
        queued = gate.queued_from(priority)
        if gate.in_use >= gate.capacity and queued >= self.settings.limits.max_queue_per_model:
            self.tiers.counters.admissions_rejected += 1
            raise model_busy(f"the model `{state.id}` has {queued} requests queued (limits.max_queue_per_model)")
        estimate = estimated_wait_ms(state, self.budgets, priority)
        deadline = effective_deadline_ms(deadline_ms, self._implicit_deadline)
        if deadline is not None and estimate is not None and estimate > deadline:
            self.tiers.counters.admissions_rejected += 1
            raise deadline_unmeetable(state.id, estimate, deadline)
        state.rate.hit(self.clock())
        return estimate

    async def run_with_oom_retry(
        self,
        model_id: str,
        modality: Modality,
        call: Callable[[Lease], Awaitable[T]],
        *,
        deadline_ms: int | None = None,
        next_model: str | None = None,
    ) -> tuple[T, Lease]:
        """Lease the model and run `call(lease)`; on device OOM evict idle models and retry once (else 507)."""
        async with self.lease(model_id, modality, deadline_ms=deadline_ms, next_model=next_model) as lease:
            result = await lease.run_with_oom_retry(lambda _engine: call(lease))
            return result, lease

    def prefetch(self, model_id: str) -> None:
        """Start loading a model in the background (x-hypnos-next-model); never raises, unknown ids ignored."""
        state = self._models.get(model_id)
        if state is None or not state.enabled or state.engine is None or self.pool.held(model_id):
            return
        if backoff_left(state, self.clock()) > 0:
            return
        if state.tier == MemoryTier.TIER1 or state.transition is not None:
            return
        task = asyncio.get_running_loop().create_task(self._prefetch(state))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _prefetch(self, state: ModelState) -> None:
        try:
            await self.tiers.ensure(state, MemoryTier.TIER1)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.info("prefetching %s failed: %s", state.id, error)

    # ---- placement control --------------------------------------------------------------------------------------

    def _idle_enabled(self, model_id: str) -> ModelState:
        state = self.get(model_id)
        if self.pool.held(model_id):
            raise model_busy(f"the model `{model_id}` is being replaced or removed; retry")
        if not state.enabled:
            raise model_disabled(model_id)
        if state.engine is None:
            raise EngineUnavailable(state.unavailable_reason or f"the model `{model_id}` cannot be served")
        if state.busy:
            raise model_busy(f"the model `{model_id}` is in use ({state.active_leases} leases); retry when idle")
        return state

    async def move(self, model_id: str, target: MemoryTier, context_len: int | None = None) -> ModelState:
        """POST /v1/memory/tier: move a model by hand (404 unknown/disabled, 429 leased, 507 no room)."""
        state = self._idle_enabled(model_id)
        await self.tiers.settle(state)
        if self._models.get(model_id) is not state or self.pool.held(model_id):  # replaced or removed meanwhile
            raise model_busy(f"the model `{model_id}` is being replaced or removed; retry")
        if target == MemoryTier.TIER1 and context_len is not None:
            current = state.placement.allocated_context_len // max(1, state.config.slots)
            state.context_override = context_len
            state.grown_context_len = 0  # an asked-for size replaces what the engine had grown to
            if state.tier == MemoryTier.TIER1 and current != context_len:
                await self.tiers.ensure(state, MemoryTier.TIER2, exclusive=True)
        await self.tiers.ensure(state, target, exclusive=True)
        return state

    async def set_enabled(self, model_id: str, enabled: bool) -> ModelState:
        """POST /v1/models/{id}/enable|disable: disabling evicts to tier 3 and is refused (429) while leased."""
        state = self.get(model_id)
        if enabled:
            state.enabled = True
            forget_load_failures(state)  # and a failed load: the next request tries at once
            if isinstance(state.engine, HostedEngine):  # an admin's enable forgives the crashes
                state.engine.quarantined = False
                state.engine.policy.reset()
            return state
        if state.busy:
            raise model_busy(f"the model `{model_id}` is in use ({state.active_leases} leases); retry when idle")
        state.enabled = False
        if state.engine is not None:
            try:
                await self.tiers.ensure(state, MemoryTier.TIER3, exclusive=True)
            except HypnosError as error:
                if error.status == 429:
                    state.enabled = True  # still in use: nothing changed
                raise
        self.kv_park.drop(model_id)  # a disabled model's parked conversations are dropped
        return state

    async def set_moe_offload(self, model_id: str, mode: MoeOffload) -> tuple[str, ModelState]:
        """POST /v1/models/{id}/moe-offload: "now" when idle (a resident model drops to tier 2), else "next_load"."""
        state = self.get(model_id)
        state.moe_offload = mode
        if state.busy or state.transition is not None:
            return "next_load", state
        if state.tier == MemoryTier.TIER1 and state.enabled and state.engine is not None:
            try:
                await self.tiers.ensure(state, MemoryTier.TIER2, exclusive=True)
            except HypnosError as error:
                if error.status != 429:
                    raise
                return "next_load", state
        return "now", state

    # ---- lifecycle ----------------------------------------------------------------------------------------------

    def context_resized(self, model_id: str, cells: int) -> None:
        """An engine grew a loaded model's context to `cells`: book the larger KV cache (safe from any thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:
                loop.call_soon_threadsafe(self._book_context, model_id, cells)
                return
        self._book_context(model_id, cells)

    def _book_context(self, model_id: str, cells: int) -> None:
        state = self._models.get(model_id)
        if state is None or state.placement.primary_tier != MemoryTier.TIER1:
            return
        estimate = state.estimate()
        state.grown_context_len = cells  # the next promotion (after tier 2) funds it: parked KV fits that layout
        plan = msgspec.structs.replace(
            state.placement,
            allocated_context_len=cells,
            vram_kv_and_workspace_bytes=estimate.kv_bytes_per_token * cells + estimate.workspace_bytes,
        )
        state.placement = plan
        with self.kv_park.lock:
            self.tiers.book(state, plan)
            self.tiers.fit_parked(model_id)

    async def stage_startup(self) -> None:
        """Load every enabled model whose initial_tier is tier 1 or 2, then flip `ready`."""
        self._loop = asyncio.get_running_loop()
        try:
            for state in self.models():
                if not state.enabled or state.engine is None or state.config.initial_tier == MemoryTier.TIER3:
                    continue
                try:
                    await self.tiers.ensure(state, state.config.initial_tier)
                except Exception as error:  # staging continues with the other models
                    logger.error("staging %s failed: %s", state.id, error)
        finally:
            self.ready = True

    def stop_admitting(self) -> None:
        """Refuse new leases from now on (503 model_not_available, "shutting down"); those in flight go on."""
        self.stopping = True

    async def end_in_flight(self, settle_secs: float) -> int:
        """Cancel every lease in flight, killing the engine hosts that still hold one after `settle_secs`."""
        self.stopping = True
        return await end_in_flight(self.live_leases, self.models(), settle_secs)

    async def shutdown(self, within: float | None = None) -> None:
        """Stop prefetches, wait for transitions, and unload every model, within `within` seconds ([server]
        shutdown_grace_secs by default); the engine hosts still running after it are killed."""
        self.stopping = True
        await self.cores.stop_telling()
        grace = self.settings.server.shutdown_grace_secs if within is None else within
        await unload_all(self.models(), self.tiers, self._background, grace)
        await asyncio.to_thread(self.prompt_cache.flush)  # the states saved last reach the disk tier
