"""Eviction choice, a pure function: lower priority first, then least reload_ms x requests_per_minute."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypnos.types import MemoryTier

RATE_TAU_S = 600.0  # requests_per_minute decays over about ten minutes


@dataclass(frozen=True, slots=True)
class EvictionCandidate:
    """An idle, evictable model as the chooser sees it: what it holds now and what keeping it warm would hold."""

    model_id: str
    priority_rank: int
    cost: float
    tier1_bytes: int
    tier2_bytes: int
    process_bytes: int
    warm_bytes: int = 0
    warm_process_bytes: int = 0
    last_used: float = 0.0


@dataclass(frozen=True, slots=True)
class Eviction:
    """One chosen demotion: which model, to which tier, and why."""

    model_id: str
    to_tier: MemoryTier
    reason: str


def eviction_order(candidates: list[EvictionCandidate]) -> list[EvictionCandidate]:
    """Candidates in the order they go: priority, then cost (reload x rate), then the longest idle."""
    return sorted(candidates, key=lambda c: (c.priority_rank, c.cost, c.last_used))


def choose_victims(
    candidates: list[EvictionCandidate],
    *,
    need_tier1: int,
    need_tier2: int = 0,
    need_process: int = 0,
    spare_tier2: int = 0,
    spare_process: int | None = None,
    reason: str = "memory_budget",
) -> list[Eviction] | None:
    """The cheapest victims freeing the needed bytes, or None when even all of them would not do.

    A victim freed only for tier 1 is kept warm in tier 2 when the spare tier-2 (and process) room holds it.
    """
    need1, need2, needp = need_tier1, need_tier2, need_process
    if need1 <= 0 and need2 <= 0 and needp <= 0:
        return []
    chosen: list[Eviction] = []
    for c in eviction_order(candidates):
        helps1 = need1 > 0 and c.tier1_bytes > 0
        helps2 = need2 > 0 and c.tier2_bytes > 0
        helpsp = needp > 0 and c.process_bytes > 0
        if not (helps1 or helps2 or helpsp):
            continue
        to_tier = MemoryTier.TIER3
        if helps1 and not helps2 and not helpsp and c.warm_bytes > 0:
            grow2 = c.warm_bytes - c.tier2_bytes
            growp = c.warm_process_bytes - c.process_bytes
            if grow2 <= spare_tier2 and (spare_process is None or growp <= spare_process):
                to_tier = MemoryTier.TIER2
                spare_tier2 -= grow2
                if spare_process is not None:
                    spare_process -= growp
        if to_tier == MemoryTier.TIER3:
            need2 -= c.tier2_bytes
            needp -= c.process_bytes
        need1 -= c.tier1_bytes
        chosen.append(Eviction(c.model_id, to_tier, reason))
        if need1 <= 0 and need2 <= 0 and needp <= 0:
            return chosen
    return None


class DecayingRate:
    """Requests per minute with exponential decay (time constant RATE_TAU_S)."""

    __slots__ = ("_at", "_score")

    def __init__(self) -> None:
        self._score = 0.0
        self._at = 0.0

    def hit(self, now: float) -> None:
        """Count one request at `now` (seconds, monotonic)."""
        self._score = self._decayed(now) + 1.0
        self._at = now

    def _decayed(self, now: float) -> float:
        if self._score == 0.0:
            return 0.0
        return self._score * math.exp(-max(0.0, now - self._at) / RATE_TAU_S)

    def per_minute(self, now: float) -> float:
        """The decayed rate at `now`; a steady rate of r per minute converges to r."""
        return self._decayed(now) * 60.0 / RATE_TAU_S
