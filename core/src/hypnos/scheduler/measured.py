"""Memory truth: a model whose engine host holds measurably more than its booking is booked at what it holds."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from hypnos.hosting import HostedEngine
from hypnos.types import MemoryTier

if TYPE_CHECKING:
    from hypnos.scheduler.books import TierBooks
    from hypnos.scheduler.state import ModelState

logger = logging.getLogger(__name__)

MEASURED_OVER_BOOKED = 1.1  # a host holding more than this times its booking is booked at what it holds


def rebook_measured(tiers: TierBooks, state: ModelState) -> bool:
    """Memory truth: a model at tier 1 whose engine host measurably holds more than 10% over its booking (where
    tier 1 is host memory: simulated or unified) is booked at the measured figure, so the next placement counts
    what it really takes. Only ever up; True when it changed the booking."""
    engine = state.engine
    if not isinstance(engine, HostedEngine) or state.tier is not MemoryTier.TIER1 or state.transition is not None:
        return False
    if not (tiers.budgets.simulated or not tiers.budgets.discrete):
        return False
    info = engine.process_info()
    booked = state.booked.vram_bytes + state.booked.pinned_ram_bytes
    if info is None or info.rss_bytes <= booked * MEASURED_OVER_BOOKED:
        return False
    extra = info.rss_bytes - booked
    plan = msgspec.structs.replace(
        state.booked, vram_kv_and_workspace_bytes=state.booked.vram_kv_and_workspace_bytes + extra
    )
    with tiers.parked.lock:
        tiers.book(state, plan)
        tiers.fit_parked(state.id)
    logger.info("%s holds %d bytes, %d over its booking: booked as measured", state.id, info.rss_bytes, extra)
    return True
