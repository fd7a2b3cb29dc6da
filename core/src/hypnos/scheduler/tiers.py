"""Moving models between tiers: planning with eviction, one transition at a time per model (books.py: the books)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Coroutine
from typing import Any

from hypnos.errors import HypnosError, model_busy, server_error
from hypnos.scheduler.books import TierBooks
from hypnos.scheduler.eviction import Eviction, EvictionCandidate, choose_victims
from hypnos.scheduler.load_backoff import forget_load_failures, is_load_failure, record_load_failure
from hypnos.scheduler.measured import correct_after_load
from hypnos.scheduler.model_state import ModelState
from hypnos.scheduler.planner import (
    FreeMemory,
    PlacementRequest,
    choose_context_len,
    plan_memory_need,
    plan_placement,
    total_weight_bytes,
)
from hypnos.scheduler.records import EvictionRecord, LoadOutcome
from hypnos.types import LayerPlacementPlan, MemoryTier

logger = logging.getLogger(__name__)


class BatchDeferred(HypnosError):
    """503: a batch line's model fits only by evicting a model interactive requests use; the line runs later."""

    def __init__(self, model_id: str) -> None:
        super().__init__(
            503,
            "model_not_available",
            f"the model `{model_id}` would have to evict a model interactive requests use; batch lines wait",
            retry_after=5,
        )


def _empty_plan(state: ModelState) -> LayerPlacementPlan:
    return LayerPlacementPlan(primary_tier=MemoryTier.TIER3, ssd_layers=state.estimate().num_layers)


class TierManager(TierBooks):
    """Performs promotions, demotions and evictions over the books (planned and booked atomically, then moved)."""

    # ---- planning -----------------------------------------------------------------------------------------------

    def placement_request(self, state: ModelState, target: MemoryTier, context_len: int | None) -> PlacementRequest:
        """The planner's input for moving `state` to `target`."""
        estimate = state.estimate()
        configured = state.context_override or state.config.context_len
        return PlacementRequest(
            model_id=state.id,
            estimate=estimate,
            target=target,
            context_len=choose_context_len(estimate, configured, context_len),
            slots=state.config.slots,
            grown_context_len=state.grown_context_len,
            moe_offload=state.moe_offload,
            min_gpu_layer_ratio=self.settings.hardware.min_gpu_layer_ratio,
            discrete=self.budgets.discrete,
        )

    def reserve(
        self, state: ModelState, target: MemoryTier, context_len: int | None = None, *, batch: bool = False
    ) -> tuple[LayerPlacementPlan, list[Eviction]]:
        """Plan `state` into `target`, choose and start the evictions it needs, and book it (no await: atomic).

        Parked KV states count as free room here: the ones in the way are dropped after booking, before any model
        would have to go (a parked state costs one prefill to lose, a model a reload). For a batch line (`batch`)
        the models in interactive use are never victims: a plan that needs them is a BatchDeferred 503."""
        with self.parked.lock:  # a park from a worker thread waits for whole bookings
            reserved = self._reserve(state, target, context_len, batch)
            self.fit_parked(state.id)
        return reserved

    def _reserve(
        self, state: ModelState, target: MemoryTier, context_len: int | None, batch: bool = False
    ) -> tuple[LayerPlacementPlan, list[Eviction]]:
        try:
            return self._reserve_among(state, target, context_len, self.candidates(state, spare_interactive=batch))
        except BatchDeferred:
            raise
        except HypnosError:
            if batch and len(self.candidates(state)) > len(self.candidates(state, spare_interactive=True)):
                raise BatchDeferred(state.id) from None  # it would fit by evicting a model in interactive use
            raise

    def _reserve_among(
        self, state: ModelState, target: MemoryTier, context_len: int | None, candidates: list[EvictionCandidate]
    ) -> tuple[LayerPlacementPlan, list[Eviction]]:
        request = self.placement_request(state, target, context_len)
        free = self.free_memory(own=state, parked_free=True)
        best_case = FreeMemory(
            tier1=free.tier1 + sum(c.tier1_bytes for c in candidates),
            tier2=free.tier2 + sum(c.tier2_bytes for c in candidates),
            process=None if free.process is None else free.process + sum(c.process_bytes for c in candidates),
            host_tier1=free.host_tier1,
        )
        try:
            plan = plan_placement(request, best_case)
        except HypnosError:
            if not request.grown_context_len:
                raise
            # the grown context does not fit even after evictions: the configured one (its parked KV is lost)
            request = dataclasses.replace(request, grown_context_len=0)
            plan = plan_placement(request, best_case)
        need1, need2, need_process = plan_memory_need(plan, free)
        evictions: list[Eviction] = []
        if need1 > 0 or need2 > 0 or need_process > 0:
            reason = "process_memory_cap" if need_process > 0 else self._shortage_reason(request, free)
            spare_process = None if free.process is None else free.process - free.process_bytes(plan)
            chosen = choose_victims(
                candidates,
                need_tier1=need1,
                need_tier2=need2,
                need_process=need_process,
                spare_tier2=max(0, free.tier2 - plan.pinned_ram_bytes),
                spare_process=spare_process,
                reason=reason,
            )
            if chosen is None:  # cannot happen when the best case fit, kept as a guard
                raise HypnosError(507, "insufficient_vram_or_ram", f"no room for the model `{state.id}`")
            evictions = chosen
        # Release the model's own booking, then the victims', then book the plan: no moment is over budget.
        self.book(state, _empty_plan(state))
        for eviction in evictions:
            self._start_eviction(self.models[eviction.model_id], eviction, for_model=state.id)
        self.book(state, plan)
        return plan, evictions

    def _shortage_reason(self, request: PlacementRequest, free: FreeMemory) -> str:
        try:
            plan_placement(request, free)
        except HypnosError:
            return "memory_budget"
        return "full_gpu_placement"  # a partial plan fitted: evicting buys the whole-GPU (or better) placement

    def _start_eviction(self, victim: ModelState, eviction: Eviction, for_model: str) -> None:
        if eviction.to_tier == MemoryTier.TIER2:
            warm = total_weight_bytes(victim.estimate())
            target_plan = LayerPlacementPlan(
                primary_tier=MemoryTier.TIER2,
                pinned_ram_layers=victim.estimate().num_layers,
                pinned_ram_bytes=warm,
            )
        else:
            target_plan = _empty_plan(victim)
        self.book(victim, target_plan)
        self.counters.evictions += 1
        self.recent_evictions.append(
            EvictionRecord(
                model=victim.id,
                for_model=for_model,
                reason=eviction.reason,
                to_tier=eviction.to_tier,
                unix_ms=int(time.time() * 1000),
            )
        )
        logger.info("evicting %s to %s for %s (%s)", victim.id, eviction.to_tier.value, for_model, eviction.reason)
        self._start_transition(victim, self._demote_engine(victim, eviction.to_tier, target_plan))

    # ---- transitions --------------------------------------------------------------------------------------------

    def _start_transition(self, state: ModelState, work: Coroutine[Any, Any, LoadOutcome]) -> asyncio.Task[Any]:
        async def run() -> LoadOutcome:
            try:
                return await work
            finally:  # cleared as the work ends, so nobody sees a finished transition as pending
                if state.transition is task:
                    state.transition = None

        task = asyncio.get_running_loop().create_task(run())
        state.transition = task

        def finished(done: asyncio.Task[Any]) -> None:
            if state.transition is done:
                state.transition = None
            if not done.cancelled():
                done.exception()  # retrieved here; waiters get it through their shield

        task.add_done_callback(finished)
        return task

    async def settle(self, state: ModelState) -> None:
        """Wait until the model has no transition in progress (a failed one is already counted and cleaned)."""
        while state.transition is not None:
            try:
                await asyncio.shield(state.transition)
            except Exception:
                continue

    async def ensure(
        self,
        state: ModelState,
        target: MemoryTier,
        context_len: int | None = None,
        *,
        exclusive: bool = False,
        batch: bool = False,
    ) -> LoadOutcome | None:
        """Bring the model to `target` (one transition at a time; racing callers share it); None if already there.

        exclusive (moves by hand, disable): refuse with 429 model_busy if the model is in use when the move starts.
        batch (a batch line's lease): evict no model in interactive use (else BatchDeferred).
        """
        while True:
            if state.transition is not None:
                current = state.transition
                try:
                    outcome = await asyncio.shield(current)
                except BatchDeferred:
                    if batch:
                        raise
                    continue  # a batch line's load held back: an interactive request may evict
                if state.tier == target and context_len is None:
                    return outcome if outcome.tier == target else None
                continue
            if state.tier == target and context_len is None:
                return None
            if exclusive and state.busy:
                raise model_busy(f"the model `{state.id}` is in use ({state.active_leases} leases); retry when idle")
            task = self._start_transition(state, self._move(state, target, context_len, batch))
            return await asyncio.shield(task)

    async def _move(
        self, state: ModelState, target: MemoryTier, context_len: int | None, batch: bool = False
    ) -> LoadOutcome:
        started = time.perf_counter()
        previous = state.tier
        if target == MemoryTier.TIER3:
            self.book(state, _empty_plan(state))
            await self._demote_engine(state, MemoryTier.TIER3, state.booked)
            return LoadOutcome(tier=target, elapsed_ms=(time.perf_counter() - started) * 1000)
        plan, evictions = self.reserve(state, target, context_len, batch=batch)
        victims = [self.models[e.model_id].transition for e in evictions]
        pending = [task for task in victims if task is not None]
        if pending:
            await asyncio.gather(*(asyncio.shield(task) for task in pending), return_exceptions=True)
        assert state.engine is not None
        loading = previous.rank >= target.rank
        try:
            if not loading:
                await state.engine.demote(target)
                phases = None
            else:
                phases = await state.engine.load(plan)
        except BaseException as error:
            await self._clean_after_failure(state)
            if loading and is_load_failure(error):
                record_load_failure(state, error, self.clock())
            if not isinstance(error, Exception):
                raise
            if isinstance(error, HypnosError):
                raise
            logger.exception("loading %s failed", state.id)
            raise server_error(f"loading the model `{state.id}` failed; the server log has the cause") from error
        state.tier = target
        state.placement = plan
        if loading:
            forget_load_failures(state)
            if self.settings.hardware.measured_placement:  # book what the host holds; correct the next estimate
                correct_after_load(self, state, self.measured)
        elapsed = (time.perf_counter() - started) * 1000
        if target == MemoryTier.TIER1:
            self.counters.promotions += 1
            if previous != MemoryTier.TIER1:
                state.record_reload(previous, elapsed)
        return LoadOutcome(tier=target, phases=phases, evicted=[e.model_id for e in evictions], elapsed_ms=elapsed)

    async def _clean_after_failure(self, state: ModelState) -> None:
        state.load_failures += 1
        self.counters.load_failures += 1
        self.book(state, _empty_plan(state))
        state.tier = MemoryTier.TIER3
        state.placement = state.booked
        try:
            if state.engine is not None:
                await state.engine.unload()
        except Exception:
            logger.exception("unloading %s after a failed load failed", state.id)
        self.forget_growth(state)

    def drop_to_tier3(self, state: ModelState) -> None:
        """The engine lost everything it held (its host process died): book nothing, tier 3."""
        self.book(state, _empty_plan(state))
        state.tier = MemoryTier.TIER3
        state.placement = state.booked
        self.forget_growth(state)

    def forget_growth(self, state: ModelState) -> None:
        """At tier 3 a grown context is forgotten, with the parked KV made for it (the model returns as configured)."""
        if state.grown_context_len:
            state.grown_context_len = 0
            self.parked.drop(state.id)

    async def _demote_engine(self, state: ModelState, to_tier: MemoryTier, plan: LayerPlacementPlan) -> LoadOutcome:
        try:
            if state.engine is not None:
                if to_tier == MemoryTier.TIER3:
                    await state.engine.unload()
                else:
                    await state.engine.demote(to_tier)
        except Exception:
            logger.exception("demoting %s to %s failed; dropping it to tier 3", state.id, to_tier.value)
            self.book(state, _empty_plan(state))
            state.tier = MemoryTier.TIER3
            state.placement = state.booked
            self.forget_growth(state)
            return LoadOutcome(tier=MemoryTier.TIER3)
        if to_tier == MemoryTier.TIER3:
            self.forget_growth(state)
        state.tier = to_tier
        state.placement = plan
        return LoadOutcome(tier=to_tier)

    async def evict_idle_for_oom(self, for_model: ModelState, *, spare_interactive: bool = False) -> list[str]:
        """After a device OOM: demote every idle tier-1 model (warm in tier 2 when it fits; for a batch line's,
        `spare_interactive`, none in interactive use), wait, return their ids."""
        evicted: list[ModelState] = []
        with self.parked.lock:  # parked KV states give way to keeping a victim warm, as in reserve()
            free = self.free_memory(parked_free=True)
            spare2 = free.tier2
            for candidate in self.candidates(exclude=for_model, spare_interactive=spare_interactive):
                if candidate.tier1_bytes <= 0:
                    continue
                grow = candidate.warm_bytes - candidate.tier2_bytes
                to_tier = MemoryTier.TIER3
                if candidate.warm_bytes and grow <= spare2 and free.process is None:
                    to_tier, spare2 = MemoryTier.TIER2, spare2 - grow
                victim = self.models[candidate.model_id]
                eviction = Eviction(victim.id, to_tier, "device_out_of_memory")
                self._start_eviction(victim, eviction, for_model=for_model.id)
                evicted.append(victim)
            self.fit_parked(for_model.id)
        tasks = [v.transition for v in evicted if v.transition is not None]
        if tasks:
            await asyncio.gather(*(asyncio.shield(t) for t in tasks), return_exceptions=True)
        return [v.id for v in evicted]
