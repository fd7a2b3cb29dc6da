"""Measured placement: after each load the booking follows what the model's engine host holds, and the model's next
estimate is corrected by the same factor (kept beside the config file, so a restart plans with it too)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import msgspec

from hypnos.hosting import HostedEngine
from hypnos.scheduler.measure_store import MeasuredFigures, MeasuredStore
from hypnos.types import LayerPlacementPlan, MemoryTier

if TYPE_CHECKING:
    from hypnos.scheduler.books import TierBooks
    from hypnos.scheduler.model_state import ModelState

logger = logging.getLogger(__name__)

MEASURED_TOLERANCE = 0.05  # a measure within 5% of the booking leaves the booking as it is
MEASURED_OVER_BOOKED = 1.1  # after serving: a host grown past 110% of its booking is booked at what it holds
RATIO_BOUNDS = (0.1, 10.0)  # a correction outside these is a measuring fault, never applied


def _on_device(tiers: TierBooks) -> bool:
    """Tier 1 is a GPU's memory (NVML measures it), not host memory (the host's resident set does)."""
    return tiers.budgets.discrete and not tiers.budgets.simulated


def _booked(tiers: TierBooks, plan: LayerPlacementPlan) -> int:
    """The part of a booking the measure stands for: tier 1 on a GPU, everything in host memory otherwise."""
    return plan.vram_bytes if _on_device(tiers) else plan.vram_bytes + plan.pinned_ram_bytes


def _rebook(tiers: TierBooks, state: ModelState, measured: int) -> None:
    """Book the model at `measured` (the difference goes to or comes from its KV and workspace, then weights)."""
    plan = state.booked
    change = measured - _booked(tiers, plan)
    kv = plan.vram_kv_and_workspace_bytes + change
    weights = plan.vram_weight_bytes + min(0, kv)
    new = msgspec.structs.replace(plan, vram_kv_and_workspace_bytes=max(0, kv), vram_weight_bytes=max(0, weights))
    with tiers.parked.lock:
        tiers.book(state, new)
        tiers.fit_parked(state.id)


def _target(tiers: TierBooks, plan: LayerPlacementPlan, measured: int) -> int:
    """What a measure books: the measure itself, except in host memory below the booking, where the booked KV and
    workspace stay on top of it (their pages are touched only as requests fill them; NVML counts them at once)."""
    booked = _booked(tiers, plan)
    if measured >= booked or _on_device(tiers):
        return measured
    return min(booked, measured + plan.vram_kv_and_workspace_bytes)


def correct_after_load(tiers: TierBooks, state: ModelState, store: MeasuredStore) -> bool:
    """After a load into tier 1: measure what the host holds, keep booked and measured, book the model at the measure
    (_target) when it is more than 5% off, and correct the next estimate by the same factor. True when it rebooked."""
    engine = state.engine
    if not isinstance(engine, HostedEngine) or state.tier is not MemoryTier.TIER1:
        return False
    measured = engine.held_bytes(_on_device(tiers))
    booked = _booked(tiers, state.booked)
    if not measured or booked <= 0:
        return False
    target = _target(tiers, state.booked, measured)
    ratio = state.estimate_ratio * target / booked
    if not RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1]:
        logger.warning("%s: measured %d bytes against %d booked, not believable: ignored", state.id, measured, booked)
        return False
    state.load_booked_bytes, state.load_measured_bytes = booked, measured
    state.correct_estimate(ratio)
    raw = state.raw_estimate.weight_bytes if state.raw_estimate is not None else 0
    figures = MeasuredFigures(
        booked_bytes=booked, measured_bytes=measured, ratio=round(ratio, 4), estimate_bytes=raw, unix=int(time.time())
    )
    store.put(state.id, figures)
    if abs(target - booked) <= MEASURED_TOLERANCE * booked:
        return False
    _rebook(tiers, state, target)
    logger.info("%s holds %d bytes after its load, %d were booked: booked at %d", state.id, measured, booked, target)
    return True


def rebook_measured(tiers: TierBooks, state: ModelState) -> bool:
    """After serving: a model at tier 1 whose host measurably grew past 110% of its booking is booked at what it
    holds (only ever up: a resident set grows as a model serves). True when it changed the booking."""
    engine = state.engine
    if not isinstance(engine, HostedEngine) or state.tier is not MemoryTier.TIER1 or state.transition is not None:
        return False
    measured = engine.held_bytes(_on_device(tiers))
    booked = _booked(tiers, state.booked)
    if measured is None or booked <= 0 or measured <= booked * MEASURED_OVER_BOOKED:
        return False
    _rebook(tiers, state, measured)
    logger.info("%s holds %d bytes, %d over its booking: booked as measured", state.id, measured, measured - booked)
    return True
