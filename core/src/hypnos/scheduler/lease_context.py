"""`async with scheduler.lease(...)`: the context that admits a request, promotes its model and releases it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from hypnos.scheduler.core_shares import CoreShares
from hypnos.scheduler.lease import Lease
from hypnos.scheduler.load_backoff import refuse_while_backing_off
from hypnos.scheduler.measured import rebook_measured
from hypnos.scheduler.model_state import ModelState
from hypnos.scheduler.pool_changes import PoolChanges
from hypnos.scheduler.stopping import shutting_down
from hypnos.scheduler.tiers import TierManager
from hypnos.types import MemoryTier, Modality


class Leasing(Protocol):
    """What a lease context asks of the scheduler (scheduler.Scheduler) that built it."""

    clock: Callable[[], float]
    pool: PoolChanges
    tiers: TierManager
    stopping: bool  # the server is stopping: no lease starts any more
    live_leases: set[Lease]  # the leases in flight
    cores: CoreShares  # the machine's cores, a share per model while it computes

    def serving(self, model_id: str, *modalities: Modality) -> ModelState:
        """The model, checked: known, enabled, installed and serving every one of the modalities."""
        ...

    def admit(self, state: ModelState, deadline_ms: int | None, priority: int = 0) -> int | None:
        """Refuse at once (429 queue full, 503 deadline) or count the request; returns the estimated wait."""
        ...

    def prefetch(self, model_id: str) -> None:
        """Start loading a model in the background (x-hypnos-next-model); never raises, unknown ids ignored."""
        ...


class LeaseContext:
    """`async with scheduler.lease(...) as lease`: admits on enter, releases on exit, error or cancellation."""

    __slots__ = (
        "_arrived",
        "_deadline_ms",
        "_held_from",
        "_lease",
        "_modalities",
        "_model_id",
        "_next",
        "_priority",
        "_sched",
        "_state",
        "_unyield",
    )

    def __init__(
        self,
        scheduler: Leasing,
        model_id: str,
        modalities: tuple[Modality, ...],
        deadline_ms: int | None,
        next_model: str | None,
        priority: int = 0,
    ) -> None:
        self._sched = scheduler
        self._priority = priority
        self._unyield: Callable[[], None] | None = None
        self._model_id = model_id
        self._modalities = modalities
        self._deadline_ms = deadline_ms
        self._next = next_model
        self._state: ModelState | None = None
        self._lease: Lease | None = None
        self._arrived = 0.0
        self._held_from = 0.0

    async def __aenter__(self) -> Lease:
        sched = self._sched
        await sched.pool.wait_turn(self._model_id)  # a model being replaced or removed: wait for the change
        state = sched.serving(self._model_id, *self._modalities)
        priority = self._priority
        estimate = sched.admit(state, self._deadline_ms, priority)
        if priority >= 0:  # from now on batch lines leave the model's reserved slots to interactive requests
            state.interactive_at = sched.clock()
        previous = state.tier
        self._arrived = arrived = time.perf_counter()
        gate = state.gate
        if not gate.try_acquire(priority):
            await gate.acquire(priority)
        state.active_leases += 1
        self._state = state
        try:
            started = time.perf_counter()
            outcome = None
            if sched.stopping:  # the server began stopping while this request queued
                raise shutting_down()
            if state.tier is not MemoryTier.TIER1 or state.transition is not None:
                refuse_while_backing_off(state, sched.clock())  # a load failed while this request queued
                try:
                    outcome = await sched.tiers.ensure(state, MemoryTier.TIER1, batch=priority < 0)
                except Exception:
                    if sched.stopping:  # the stop ended the load (its host killed): the stop is the reason
                        raise shutting_down() from None
                    raise
            if sched.stopping:
                raise shutting_down()
            lease = Lease(
                model_id=state.id,
                engine=state.engine,  # type: ignore[arg-type]
                modalities=list(self._modalities),
                previous_tier=previous,
                placement=state.placement,
                estimated_wait_ms=estimate,
                queue_ms=(started - arrived) * 1000,
                on_device_oom=lambda: sched.tiers.evict_idle_for_oom(state, spare_interactive=priority < 0),
                priority=priority,
            )
            if outcome is not None:
                lease.tier_switch_latency_ms = (time.perf_counter() - started) * 1000
                lease.tier_switch_phases = outcome.phases
                lease.evicted_models = list(outcome.evicted)
        except BaseException:
            self._release(state)
            raise
        if self._next is not None and self._next != state.id:
            sched.prefetch(self._next)
        self._lease = lease
        if priority < 0:  # low-priority work gives its slot back when an interactive request waits
            self._unyield = gate.hold_yielding(priority, lease.give_back)
        self._held_from = time.perf_counter()
        sched.live_leases.add(lease)
        sched.cores.start(state)  # the model computes: its share of the cores, planned with the others computing
        return lease

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        state = self._state
        if state is None:
            return
        lease = self._lease
        if lease is not None:
            self._sched.live_leases.discard(lease)
            self._sched.cores.stop(state)
            if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
                lease.cancel.cancel()  # the client went away: the engine stops at its next check
        state.record_service((time.perf_counter() - self._held_from) * 1000)
        state.last_used = self._sched.clock()
        if self._priority >= 0:
            state.interactive_at = state.last_used
        self._release(state)
        rebook_measured(self._sched.tiers, state)  # what its host holds after serving, if more than booked

    def _release(self, state: ModelState) -> None:
        self._state = None
        if self._unyield is not None:
            self._unyield()
            self._unyield = None
        state.active_leases -= 1
        state.gate.release(self._priority)
