"""Eviction choice, a pure function: lower priority first, then least reload_ms x requests_per_minute."""

from __future__ import annotations

import math
from operator import itemgetter
from typing import NamedTuple

from hypnos.types import MemoryTier

RATE_TAU_S = 600.0  # requests_per_minute decays over about ten minutes


class EvictionCandidate(NamedTuple):
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


class Eviction(NamedTuple):
    """One chosen demotion: which model, to which tier, and why."""

    model_id: str
    to_tier: MemoryTier
    reason: str


_ORDER_KEY = itemgetter(1, 2, 8)  # (priority_rank, cost, last_used) of an EvictionCandidate


def eviction_order(candidates: list[EvictionCandidate]) -> list[EvictionCandidate]:
    """Candidates in the order they go: priority, then cost (reload x rate), then the longest idle."""
    return sorted(candidates, key=_ORDER_KEY)


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
    append = chosen.append
    new = tuple.__new__  # Eviction(...) without the namedtuple's Python-level __new__: this loop is the hot path
    tier2, tier3 = MemoryTier.TIER2, MemoryTier.TIER3
    for model_id, _rank, _cost, t1, t2, proc, warm, warm_proc, _last in sorted(candidates, key=_ORDER_KEY):
        helps2 = need2 > 0 and t2 > 0
        helpsp = needp > 0 and proc > 0
        if not helps2 and not helpsp:
            if need1 <= 0 or t1 <= 0:
                continue
            if warm > 0:  # freed for tier 1 only: kept warm in tier 2 when the spare room holds it
                grow2 = warm - t2
                growp = warm_proc - proc
                if grow2 <= spare_tier2 and (spare_process is None or growp <= spare_process):
                    spare_tier2 -= grow2
                    if spare_process is not None:
                        spare_process -= growp
                    need1 -= t1
                    append(new(Eviction, (model_id, tier2, reason)))
                    if need1 <= 0 and need2 <= 0 and needp <= 0:
                        return chosen
                    continue
        need2 -= t2
        needp -= proc
        need1 -= t1
        append(new(Eviction, (model_id, tier3, reason)))
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
        score = self._score
        if score == 0.0:
            return 0.0
        return score * math.exp(-max(0.0, now - self._at) / RATE_TAU_S) * (60.0 / RATE_TAU_S)
