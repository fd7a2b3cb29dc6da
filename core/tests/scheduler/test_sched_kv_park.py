"""Parked KV states in the scheduler's books: counted in tier 2 and against the process cap, dropped (oldest first)
before a model is evicted, refused when they would not fit, and un-booked when taken back."""

from __future__ import annotations

from hypnos.chat import InputMessage, TextPart
from hypnos.config import MiB
from hypnos.engine import CancelToken, ChatInput
from hypnos.types import MemoryTier, Modality
from sched_kit import ManualClock, fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION
T1, T2, T3 = MemoryTier.TIER1, MemoryTier.TIER2, MemoryTier.TIER3
WEIGHTS = 400 * MiB  # fake_model: 4 layers of 100 MiB
PARKING = {"enabled": True, "max_bytes": 8192 * MiB}


async def chat(scheduler, model_id: str):  # type: ignore[no-untyped-def]
    """One chat through a lease (the fake engine then has a conversation to park); the lease's load phases."""
    request = ChatInput(messages=[InputMessage(role="user", parts=[TextPart(text="hello")])], max_tokens=2)
    async with scheduler.lease(model_id, TEXT) as lease:
        async for _ in lease.engine.chat(request, CancelToken()):
            pass
        return lease.tier_switch_phases


def parked_models(scheduler) -> list[str]:  # type: ignore[no-untyped-def]
    return [model.model for model in scheduler.status().kv_park.models]


async def test_parked_bytes_count_in_tier2_and_are_unbooked_when_taken_back() -> None:
    scheduler = make_scheduler(
        [fake_model("a", park_bytes=64 * MiB)], hardware={"pinned_ram_budget_bytes": 2048 * MiB, "kv_park": PARKING}
    )
    await chat(scheduler, "a")
    before = scheduler.status()
    assert before.tier2_pinned_ram_used_bytes == 0 and before.kv_park.used_bytes == 0
    await scheduler.move("a", T2)
    parked = scheduler.status()
    assert parked.kv_park.used_bytes == 64 * MiB and parked_models(scheduler) == ["a"]
    assert parked.tier2_pinned_ram_used_bytes == WEIGHTS + 64 * MiB
    assert parked.tier2_pinned_ram_free_bytes == 2048 * MiB - WEIGHTS - 64 * MiB
    assert parked.process_memory_bytes >= WEIGHTS + 64 * MiB
    phases = await chat(scheduler, "a")  # back in tier 1: the conversation is restored and leaves tier 2
    assert phases is not None and phases.kv_restored_tokens == 64 * MiB // 1024  # one token per KiB of KV
    after = scheduler.status()
    assert after.kv_park.used_bytes == 0 and after.kv_park.models == []
    assert after.tier2_pinned_ram_used_bytes == 0 and after.tier2_pinned_ram_free_bytes == 2048 * MiB


async def test_parking_that_would_not_fit_tier2_is_refused() -> None:
    scheduler = make_scheduler(
        [fake_model("a", park_bytes=200 * MiB)], hardware={"pinned_ram_budget_bytes": 500 * MiB, "kv_park": PARKING}
    )
    await chat(scheduler, "a")
    await scheduler.move("a", T2)  # 400 MiB warm leaves 100 MiB: the 200 MiB conversation is not parked
    status = scheduler.status()
    assert scheduler.get("a").tier == T2 and status.kv_park.models == []
    assert status.tier2_pinned_ram_used_bytes == WEIGHTS <= status.capabilities.pinned_ram_budget_bytes
    phases = await chat(scheduler, "a")
    assert phases is not None and phases.kv_restored_tokens is None  # nothing came back: it prefills again


async def test_a_tier2_promotion_drops_the_oldest_parked_state_before_evicting_a_warm_model() -> None:
    clock = ManualClock()
    models = [
        fake_model("a", park_bytes=100 * MiB),
        fake_model("b", park_bytes=100 * MiB),
        fake_model("c", layers=1),  # 100 MiB
    ]
    scheduler = make_scheduler(
        models, clock=clock, hardware={"pinned_ram_budget_bytes": 1000 * MiB, "kv_park": PARKING}
    )
    await chat(scheduler, "a")
    await chat(scheduler, "b")
    await scheduler.move("a", T2)
    clock.advance(5)
    await scheduler.move("b", T2)
    full = scheduler.status()
    assert full.tier2_pinned_ram_used_bytes == 1000 * MiB and parked_models(scheduler) == ["a", "b"]
    await scheduler.move("c", T2)  # 100 MiB short: a's conversation (parked first) goes, no model does
    status = scheduler.status()
    assert [s.tier for s in scheduler.models()] == [T2, T2, T2]
    assert parked_models(scheduler) == ["b"] and status.recent_evictions == []
    assert status.tier2_pinned_ram_used_bytes == 1000 * MiB
    await scheduler.move("c", T3)
    await scheduler.move("c", T2)  # room again: b's conversation stays
    assert parked_models(scheduler) == ["b"]


async def test_the_process_cap_drops_parked_states_before_a_warm_model() -> None:
    # Simulated tier 1 is host memory: a tier-1 model counts against the process cap with its KV and weights.
    models = [fake_model("a", park_bytes=150 * MiB), fake_model("b")]
    hardware = {"max_process_memory_bytes": 900 * MiB, "min_gpu_layer_ratio": 1.0, "kv_park": PARKING}
    scheduler = make_scheduler(models, hardware=hardware)
    await chat(scheduler, "a")
    await scheduler.move("a", T2)
    assert scheduler.status().process_memory_bytes >= WEIGHTS + 150 * MiB
    assert parked_models(scheduler) == ["a"]
    await chat(scheduler, "b")  # 401 MiB more: 951 > 900, the parked state goes and a stays warm
    status = scheduler.status()
    assert scheduler.get("a").tier == T2 and scheduler.get("b").tier == T1
    assert status.kv_park.models == [] and status.recent_evictions == []
    assert scheduler.tiers.used_process <= 900 * MiB


async def test_a_parked_state_never_costs_a_model_its_warm_copy_when_tier1_makes_room() -> None:
    # c needs a's tier-1 room; tier 2 holds a warm only once b's parked conversation is dropped.
    clock = ManualClock()
    models = [fake_model("a"), fake_model("b", park_bytes=300 * MiB), fake_model("c"), fake_model("d")]
    hardware = {"pinned_ram_budget_bytes": 800 * MiB, "min_gpu_layer_ratio": 1.0, "kv_park": PARKING}
    scheduler = make_scheduler(models, clock=clock, hardware=hardware)
    await chat(scheduler, "b")
    await scheduler.move("b", T2)  # 400 warm + 300 parked of 800
    await chat(scheduler, "a")
    clock.advance(1)
    await chat(scheduler, "d")
    clock.advance(1)
    await chat(scheduler, "c")  # 1024 MiB of tier 1 hold two: a (least recently used) goes to tier 2
    assert scheduler.get("a").tier == T2 and scheduler.recent_evictions[0].to_tier == T2
    assert parked_models(scheduler) == [] and scheduler.tiers.used_tier2 <= 800 * MiB


async def test_a_device_oom_keeps_its_victim_warm_over_a_parked_state() -> None:
    models = [fake_model("b", park_bytes=300 * MiB), fake_model("a"), fake_model("emb", modality="embeddings")]
    hardware = {"pinned_ram_budget_bytes": 800 * MiB, "kv_park": PARKING}
    scheduler = make_scheduler(models, hardware=hardware)
    await chat(scheduler, "b")
    await scheduler.move("b", T2)  # 400 warm + 300 parked of 800
    await chat(scheduler, "a")
    async with scheduler.lease("emb", Modality.EMBEDDINGS) as lease:
        assert await lease.on_device_oom() == ["a"]
    assert scheduler.get("a").tier == T2 and scheduler.recent_evictions[0].reason == "device_out_of_memory"
    assert parked_models(scheduler) == [] and scheduler.tiers.used_tier2 <= 800 * MiB


def grown(grow_to: int = 4096):  # type: ignore[no-untyped-def]
    """A scheduler (1024 MiB device, whole-GPU placements only) with one model of 1024 cells whose chats grow its
    context to `grow_to` (KV 1 KiB/token)."""
    model = fake_model("a", park_bytes=64 * MiB, grow_context_to=grow_to)
    hardware = {"pinned_ram_budget_bytes": 2048 * MiB, "kv_park": PARKING, "min_gpu_layer_ratio": 1.0}
    return make_scheduler([model], hardware=hardware)


async def test_a_grown_context_is_booked_again_after_tier2_and_its_parked_conversation_restores() -> None:
    scheduler = grown()
    await chat(scheduler, "a")
    assert scheduler.get("a").placement.allocated_context_len == 4096
    await scheduler.move("a", T2)
    phases = await chat(scheduler, "a")
    assert phases is not None and phases.kv_restored_tokens == 64 * MiB // 1024
    placement = scheduler.get("a").placement
    assert placement.allocated_context_len == 4096 and placement.vram_kv_and_workspace_bytes == 4096 * 1024
    assert scheduler.status().tier1_vram_used_bytes == WEIGHTS + 4096 * 1024


async def test_tier3_forgets_the_growth_and_the_parked_conversation_made_for_it() -> None:
    scheduler = grown()
    await chat(scheduler, "a")
    await scheduler.move("a", T3)
    assert parked_models(scheduler) == []
    await scheduler.move("a", T1)
    assert scheduler.get("a").placement.allocated_context_len == 1024


async def test_a_context_asked_for_by_hand_replaces_the_growth() -> None:
    scheduler = grown()
    await chat(scheduler, "a")
    await scheduler.move("a", T2)
    await scheduler.move("a", T1, context_len=2048)
    assert scheduler.get("a").placement.allocated_context_len == 2048


async def test_a_grown_context_that_no_longer_fits_comes_back_at_its_configured_size() -> None:
    scheduler = grown(grow_to=700 * 1024)  # 400 MiB of weights and 700 MiB of KV: over the 1024 MiB device
    await chat(scheduler, "a")
    await scheduler.move("a", T2)
    await scheduler.move("a", T1)  # not a 507: the configured context fits, the parked one (made for 700k) is dropped
    assert scheduler.get("a").placement.allocated_context_len == 1024
    assert parked_models(scheduler) == []
