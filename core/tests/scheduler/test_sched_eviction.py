"""The eviction chooser and the decaying request rate."""

from __future__ import annotations

import pytest
from hypnos.scheduler.eviction import DecayingRate, EvictionCandidate, choose_victims, eviction_order
from hypnos.types import MemoryTier


def cand(name: str, rank: int = 1, cost: float = 0.0, t1: int = 100, t2: int = 0, warm: int = 0) -> EvictionCandidate:
    return EvictionCandidate(
        model_id=name,
        priority_rank=rank,
        cost=cost,
        tier1_bytes=t1,
        tier2_bytes=t2,
        process_bytes=t1 + t2,
        warm_bytes=warm,
        warm_process_bytes=warm,
    )


def test_lower_priority_goes_first_then_least_cost() -> None:
    order = eviction_order([cand("high", 2, 0.0), cand("busy", 1, 50.0), cand("cheap", 1, 1.0), cand("low", 0, 99.0)])
    assert [c.model_id for c in order] == ["low", "cheap", "busy", "high"]


@pytest.mark.parametrize(
    ("need", "expected"),
    [(0, []), (50, ["a"]), (100, ["a"]), (101, ["a", "b"]), (300, ["a", "b", "c"])],
)
def test_greedy_until_enough(need: int, expected: list[str]) -> None:
    victims = choose_victims([cand("c", cost=3), cand("a", cost=1), cand("b", cost=2)], need_tier1=need)
    assert victims is not None
    assert [v.model_id for v in victims] == expected


def test_not_enough_is_none() -> None:
    assert choose_victims([cand("a"), cand("b")], need_tier1=201) is None


def test_victims_holding_nothing_useful_are_skipped() -> None:
    victims = choose_victims([cand("ram-only", t1=0, t2=500), cand("gpu")], need_tier1=100)
    assert victims is not None and [v.model_id for v in victims] == ["gpu"]


def test_kept_warm_when_tier2_has_room_else_disk() -> None:
    victims = choose_victims(
        [cand("a", cost=1, warm=100), cand("b", cost=2, warm=100)], need_tier1=200, spare_tier2=150, reason="x"
    )
    assert victims is not None
    assert [(v.model_id, v.to_tier, v.reason) for v in victims] == [
        ("a", MemoryTier.TIER2, "x"),
        ("b", MemoryTier.TIER3, "x"),
    ]


def test_tier2_need_sends_victims_to_disk() -> None:
    victims = choose_victims([cand("warm", t1=0, t2=300, warm=0)], need_tier1=0, need_tier2=200)
    assert victims is not None and victims[0].to_tier == MemoryTier.TIER3


def test_process_need_sends_victims_to_disk() -> None:
    victims = choose_victims([cand("a", warm=100)], need_tier1=0, need_process=50, spare_tier2=1000)
    assert victims is not None and victims[0].to_tier == MemoryTier.TIER3


def test_rate_decays_over_ten_minutes() -> None:
    rate = DecayingRate()
    assert rate.per_minute(0.0) == 0.0
    for second in range(0, 3600, 30):  # two requests a minute for an hour
        rate.hit(float(second))
    assert rate.per_minute(3600.0) == pytest.approx(2.0, rel=0.05)
    assert rate.per_minute(3600.0 + 600.0) == pytest.approx(2.0 / 2.718, rel=0.05)
