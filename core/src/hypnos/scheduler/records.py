"""What the tier manager reports: recent automatic evictions, the counters for /metrics, one transition's outcome."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from hypnos.types import MemoryTier, TierSwitchPhases

RECENT_EVICTIONS = 32


class EvictionRecord(msgspec.Struct, kw_only=True):
    """One automatic eviction, as recent_evictions lists it."""

    model: str
    for_model: str
    reason: str
    to_tier: MemoryTier
    unix_ms: int


@dataclass
class SchedulerCounters:
    """Totals for /metrics: promotions, evictions, load failures, rejected admissions."""

    promotions: int = 0
    evictions: int = 0
    load_failures: int = 0
    admissions_rejected: int = 0


@dataclass
class LoadOutcome:
    """What one transition did: the phases the engine reported, who was evicted, how long it took."""

    tier: MemoryTier | None = None
    phases: TierSwitchPhases | None = None
    evicted: list[str] = field(default_factory=list)
    elapsed_ms: float = 0.0
