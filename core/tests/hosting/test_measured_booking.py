"""Memory truth: a model whose engine host holds more than its booking is booked at what it holds, and the planner
places the next model on that figure."""

from __future__ import annotations

from host_kit import chat_text, hosted_model, hosted_scheduler
from hypnos.config import MiB
from hypnos.types import MemoryTier


async def test_a_host_holding_more_than_its_estimate_is_booked_as_measured() -> None:
    # the fake estimate says ~2 MiB; a Python host holds tens of MiB: far more than 10% off
    small = {"layers": 1, "layer_mib": 1, "context_len": 16}
    scheduler = hosted_scheduler([hosted_model("a", **small), hosted_model("b", **small)], vram_mib=20)
    try:
        await chat_text(scheduler, "a")
        entry = next(m for m in scheduler.status().models if m.id == "a")
        measured = entry.measured_bytes
        assert measured is not None and measured > 10 * MiB
        assert abs(entry.booked_bytes - measured) <= 0.05 * measured  # within 5% of the measured figure
        # both estimates fit the 20 MiB tier 1, but what `a` really holds does not leave room for `b`: it goes
        assert scheduler.tiers.booked_tier1 >= measured
        await chat_text(scheduler, "b")
        assert scheduler.get("b").tier == MemoryTier.TIER1
        assert scheduler.get("a").tier != MemoryTier.TIER1
        assert [e.model for e in scheduler.recent_evictions] == ["a"]
    finally:
        await scheduler.shutdown()
