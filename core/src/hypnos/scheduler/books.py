"""The tier books: every model's booking against the budgets, the room left, and the idle models evictable."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from hypnos.config import Settings
from hypnos.hardware import HardwareProbe
from hypnos.scheduler.budgets import Budgets, Tier1Figures, tier1_figures
from hypnos.scheduler.eviction import EvictionCandidate
from hypnos.scheduler.measure_store import MeasuredStore
from hypnos.scheduler.model_state import ModelState
from hypnos.scheduler.planner import FreeMemory
from hypnos.scheduler.records import RECENT_EVICTIONS, EvictionRecord, SchedulerCounters
from hypnos.types import LayerPlacementPlan, MemoryTier, ModelPriority

if TYPE_CHECKING:
    from hypnos.scheduler.kv_park import KvParkStore

logger = logging.getLogger(__name__)


class TierBooks:
    """The bookings of every model against the tier budgets, what is free, and who could be evicted.

    Parked KV states (section 14) are host memory booked next to the models: they count in tier 2 and against the
    process cap, and a placement short of either drops them (least recently parked first) before it evicts a model.
    """

    def __init__(
        self,
        models: dict[str, ModelState],
        settings: Settings,
        budgets: Budgets,
        hardware: HardwareProbe,
        clock: Callable[[], float],
        parked: KvParkStore,
        *,
        measured: MeasuredStore | None = None,
    ) -> None:
        self.models = models
        self.settings = settings
        self.budgets = budgets
        self.hardware = hardware
        self.clock = clock
        self.parked = parked
        self.measured = measured if measured is not None else MeasuredStore(None)  # measured placement's figures
        parked.bind_budget(self.parking_room)
        self.booked_tier1 = 0
        self.booked_tier2 = 0
        self.booked_process = 0
        self.recent_evictions: deque[EvictionRecord] = deque(maxlen=RECENT_EVICTIONS)
        self.counters = SchedulerCounters()

    # ---- accounting -------------------------------------------------------------------------------------------------

    def book(self, state: ModelState, plan: LayerPlacementPlan) -> None:
        """Make `plan` the model's booking, updating the tier totals."""
        old = state.booked
        self.booked_tier1 += plan.vram_bytes - old.vram_bytes
        self.booked_tier2 += plan.pinned_ram_bytes - old.pinned_ram_bytes
        self.booked_process += self.budgets.process_bytes(plan) - self.budgets.process_bytes(old)
        state.booked = plan

    @property
    def used_tier2(self) -> int:
        """Tier-2 bytes in use: the models' bookings plus the parked KV states."""
        return self.booked_tier2 + self.parked.used_bytes

    @property
    def used_process(self) -> int:
        """Host bytes in use by the books: the models' process bytes plus the parked KV states."""
        return self.booked_process + self.parked.used_bytes

    def parking_room(self) -> int:
        """Host bytes the models' bookings leave for parked KV states under the tier-2 budget and the process cap."""
        room = self.budgets.tier2_bytes - self.booked_tier2
        cap = self.budgets.process_cap_bytes
        if cap is not None:
            room = min(room, cap - self.booked_process)
        return max(0, room)

    def fit_parked(self, for_model: str) -> None:
        """Drop the least recently parked KV states until the bookings and the parked bytes fit both budgets."""
        with self.parked.lock:
            over = self.parked.used_bytes - self.parking_room()
            if over > 0:
                dropped = self.parked.release(over)
                logger.info("dropped the parked KV of %s for %s (%d bytes short)", ", ".join(dropped), for_model, over)

    def tier1(self) -> Tier1Figures:
        """Booked vs device-real tier-1 figures (section 14)."""
        return tier1_figures(self.budgets, self.booked_tier1, self.hardware.vram_free_bytes())

    def free_memory(self, own: ModelState | None = None, *, parked_free: bool = False) -> FreeMemory:
        """What a plan may use now, counting `own`'s current booking as free (it is replaced), and the parked KV
        states as used unless `parked_free` (a placement may drop them)."""
        mine = own.booked if own is not None else LayerPlacementPlan()
        parked = 0 if parked_free else self.parked.used_bytes
        cap = self.budgets.process_cap_bytes
        process = None if cap is None else cap - self.booked_process - parked + self.budgets.process_bytes(mine)
        return FreeMemory(
            tier1=self.tier1().effective_free + mine.vram_bytes,
            tier2=max(0, self.budgets.tier2_bytes - self.booked_tier2 - parked) + mine.pinned_ram_bytes,
            process=process,
            host_tier1=self.budgets.simulated or not self.budgets.discrete,
        )

    def candidates(self, exclude: ModelState, *, spare_interactive: bool = False) -> list[EvictionCandidate]:
        """Idle, evictable models holding memory (never leased, moving, or realtime_pinned; with `spare_interactive`,
        for a batch line, never one in interactive use)."""
        now = self.clock()
        window = self.settings.server.batch_interactive_secs
        budgets = self.budgets
        host_tier1 = budgets.simulated or not budgets.discrete
        pinned_rank = ModelPriority.REALTIME_PINNED.rank
        tier1, tier2, tier3 = MemoryTier.TIER1, MemoryTier.TIER2, MemoryTier.TIER3
        out: list[EvictionCandidate] = []
        append = out.append
        new = tuple.__new__  # EvictionCandidate(...) without the namedtuple's Python-level __new__
        for state in self.models.values():  # every placement's hot loop: plain reads, cached estimates
            booked = state.booked
            held1 = booked.vram_weight_bytes + booked.vram_kv_and_workspace_bytes
            held2 = booked.pinned_ram_bytes
            if not (held1 or held2) or state is exclude or state.priority_rank == pinned_rank:
                continue
            gate = state.gate
            if state.active_leases or gate.in_use or gate.queued or state.transition is not None or not state.engine:
                continue
            if spare_interactive and state.in_interactive_use(now, window):
                continue
            rate = state.rate.per_minute(now)
            warm = 0
            where = tier3  # an eviction leaves a GPU model warm in tier 2, anything else on disk
            if state.tier is tier1:
                estimate = state.estimate()
                warm = estimate.weight_bytes + estimate.projector_bytes
                where = tier2
            cost = state.reload_estimate_ms(budgets, where) * rate if rate else 0.0
            process = held2 + held1 if host_tier1 else held2
            rank = state.priority_rank
            append(
                new(
                    EvictionCandidate,
                    (state.config.id, rank, cost, held1, held2, process, warm, warm, state.last_used),
                )
            )
        return out
