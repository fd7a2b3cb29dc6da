"""Promotion, eviction, load failures, device OOM, prefetch, enable/disable and moves, with fake engines."""

from __future__ import annotations

import asyncio

import pytest
from hypnos.engine import DeviceOutOfMemory
from hypnos.errors import HypnosError
from hypnos.types import MemoryTier, Modality, MoeOffload
from sched_kit import ManualClock, fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION
T1, T2, T3 = MemoryTier.TIER1, MemoryTier.TIER2, MemoryTier.TIER3
TIMEOUT = 10


async def use(scheduler, model_id: str) -> list[str]:
    async with scheduler.lease(model_id, TEXT) as lease:
        return list(lease.evicted_models)


async def test_eviction_makes_room_and_keeps_the_victim_warm() -> None:
    # 1024 MiB tier 1: two 401 MiB models fit, the third evicts the least used one into tier 2.
    clock = ManualClock()
    whole = {"min_gpu_layer_ratio": 1.0}
    scheduler = make_scheduler([fake_model("a"), fake_model("b"), fake_model("c")], clock=clock, hardware=whole)
    await use(scheduler, "a")
    for _ in range(5):
        await use(scheduler, "b")
    evicted = await asyncio.wait_for(use(scheduler, "c"), TIMEOUT)
    assert evicted == ["a"]
    assert scheduler.get("a").tier == T2
    assert scheduler.get("a").placement.primary_tier == T2
    assert [s.tier for s in scheduler.models()] == [T2, T1, T1]
    record = scheduler.recent_evictions[0]
    assert (record.model, record.for_model, record.to_tier, record.reason) == ("a", "c", T2, "memory_budget")
    assert record.unix_ms > 0
    assert scheduler.counters.evictions == 1
    assert scheduler.tiers.booked_tier1 <= scheduler.budgets.tier1_bytes


async def test_lower_priority_goes_first() -> None:
    scheduler = make_scheduler(
        [fake_model("low", priority="low"), fake_model("high", priority="high"), fake_model("c")],
        hardware={"min_gpu_layer_ratio": 1.0},
    )
    await use(scheduler, "low")
    for _ in range(3):
        await use(scheduler, "high")
    await use(scheduler, "low")  # more recent and cheaper per rate, but lower priority
    assert await use(scheduler, "c") == ["low"]


async def test_realtime_pinned_and_leased_models_are_never_evicted() -> None:
    scheduler = make_scheduler(
        [fake_model("pinned", priority="realtime_pinned"), fake_model("busy"), fake_model("c")],
        hardware={"min_gpu_layer_ratio": 1.0},
    )
    await use(scheduler, "pinned")
    release, entered = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with scheduler.lease("busy", TEXT):
            entered.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await entered.wait()
    with pytest.raises(HypnosError) as caught:
        await use(scheduler, "c")
    assert (caught.value.status, caught.value.type) == (507, "insufficient_vram_or_ram")
    assert scheduler.get("pinned").tier == T1 and scheduler.get("busy").tier == T1
    assert scheduler.get("c").tier == T3 and scheduler.get("c").engine.loads == 0
    release.set()
    await holder
    assert await use(scheduler, "c") == ["busy"]


async def test_partial_placement_without_eviction_is_upgraded_to_whole_gpu() -> None:
    # c is larger: 7 x 100 MiB; with a resident it fits only split; evicting a gives it the whole GPU.
    scheduler = make_scheduler([fake_model("a"), fake_model("c", layers=7)], hardware={"min_gpu_layer_ratio": 0.5})
    await use(scheduler, "a")
    assert await use(scheduler, "c") == ["a"]
    assert scheduler.get("c").placement.gpu_layers == 7
    assert scheduler.recent_evictions[0].reason == "full_gpu_placement"


async def test_partial_placement_when_nothing_can_be_evicted() -> None:
    scheduler = make_scheduler([fake_model("big", layers=16)])  # 1600 MiB in a 1024 MiB tier 1
    async with scheduler.lease("big", TEXT) as lease:
        placement = lease.placement
    assert placement.primary_tier == T1
    assert placement.gpu_layers == 10 and placement.pinned_ram_layers == 6
    assert scheduler.tiers.booked_tier2 == placement.pinned_ram_bytes


async def test_too_big_is_507() -> None:
    scheduler = make_scheduler([fake_model("huge", layers=40)], hardware={"min_gpu_layer_ratio": 0.5})
    with pytest.raises(HypnosError) as caught:
        await use(scheduler, "huge")
    assert caught.value.status == 507


async def test_process_cap_is_507_process_memory_cap() -> None:
    scheduler = make_scheduler([fake_model("m")], hardware={"max_process_memory_bytes": 100 * 1024 * 1024})
    with pytest.raises(HypnosError) as caught:
        await use(scheduler, "m")
    assert (caught.value.status, caught.value.type) == (507, "process_memory_cap")


async def test_process_cap_evicts_with_its_reason() -> None:
    scheduler = make_scheduler([fake_model("a"), fake_model("b")], hardware={"max_process_memory_bytes": 600 * 2**20})
    await use(scheduler, "a")
    assert await use(scheduler, "b") == ["a"]
    assert scheduler.get("a").tier == T3
    assert scheduler.recent_evictions[0].reason == "process_memory_cap"


async def test_load_failure_is_500_counted_and_clean() -> None:
    clock = ManualClock()
    scheduler = make_scheduler([fake_model("m", fail_load=True, load_ms=10)], clock=clock)
    for _ in range(2):
        clock.advance(600)  # past the backoff a failed load leaves (test_sched_load_backoff.py)
        with pytest.raises(HypnosError) as caught:
            await use(scheduler, "m")
        assert (caught.value.status, caught.value.type) == (500, "server_error")
        assert "fake load failure" in caught.value.message
    state = scheduler.get("m")
    assert state.load_failures == 2 and scheduler.counters.load_failures == 2
    assert state.tier == T3 and state.booked.vram_bytes == 0 and state.active_leases == 0
    assert scheduler.tiers.booked_tier1 == 0


async def test_racing_requests_share_one_failed_load() -> None:
    scheduler = make_scheduler([fake_model("m", fail_load=True, load_ms=30, slots=4)])
    results = await asyncio.gather(*(use(scheduler, "m") for _ in range(4)), return_exceptions=True)
    assert all(isinstance(r, HypnosError) and r.status == 500 for r in results)
    assert scheduler.get("m").load_failures == 1


async def test_device_oom_evicts_idle_models_and_retries_once() -> None:
    scheduler = make_scheduler([fake_model("other"), fake_model("emb", modality="embeddings", oom_once=True)])
    await use(scheduler, "other")
    async with scheduler.lease("emb", Modality.EMBEDDINGS) as lease:
        result = await lease.run_with_oom_retry(lambda engine: engine.embed(["hello"], lease.cancel))
        telemetry = lease.telemetry()
    assert len(result.vectors) == 1
    assert telemetry.evicted_models == ["other"]
    assert scheduler.get("other").tier == T2
    assert scheduler.recent_evictions[0].reason == "device_out_of_memory"


async def test_device_oom_twice_is_507() -> None:
    scheduler = make_scheduler([fake_model("m")])
    calls = 0

    async def always_oom(_engine) -> None:
        nonlocal calls
        calls += 1
        raise DeviceOutOfMemory()

    with pytest.raises(HypnosError) as caught:
        await scheduler.run_with_oom_retry("m", TEXT, lambda lease: always_oom(lease.engine))
    assert (caught.value.status, caught.value.type, calls) == (507, "device_out_of_memory", 2)
    assert scheduler.get("m").active_leases == 0


async def test_run_with_oom_retry_returns_result_and_lease() -> None:
    scheduler = make_scheduler([fake_model("m", modality="embeddings", oom_once=True)])
    result, lease = await scheduler.run_with_oom_retry(
        "m", Modality.EMBEDDINGS, lambda lease: lease.engine.embed(["a", "b"], lease.cancel)
    )
    assert len(result.vectors) == 2 and lease.previous_tier == T3


async def test_next_model_is_prefetched_in_the_background() -> None:
    models = [fake_model("stt"), fake_model("chat", load_ms=50), fake_model("broken", fail_load=True)]
    scheduler = make_scheduler(models)
    async with scheduler.lease("stt", TEXT, next_model="chat") as lease:
        assert lease.tier_switch_latency_ms < 50  # the current request does not wait for the prefetch
    await asyncio.wait_for(scheduler.tiers.settle(scheduler.get("chat")), TIMEOUT)
    assert scheduler.get("chat").tier == T1
    async with scheduler.lease("chat", TEXT) as lease:
        assert lease.previous_tier == T1 and lease.tier_switch_latency_ms == 0
    async with scheduler.lease("stt", TEXT, next_model="unknown-model"):
        pass
    async with scheduler.lease("stt", TEXT, next_model="broken"):
        pass
    await asyncio.sleep(0.02)
    assert scheduler.get("broken").tier == T3


async def test_disable_and_enable() -> None:
    scheduler = make_scheduler([fake_model("m")])
    await use(scheduler, "m")
    release, entered = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with scheduler.lease("m", TEXT):
            entered.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await entered.wait()
    with pytest.raises(HypnosError) as caught:
        await scheduler.set_enabled("m", False)
    assert (caught.value.status, caught.value.type) == (429, "model_busy")
    release.set()
    await holder
    state = await scheduler.set_enabled("m", False)
    assert not state.enabled and state.tier == T3 and scheduler.tiers.booked_tier1 == 0
    with pytest.raises(HypnosError) as caught:
        await use(scheduler, "m")
    assert (caught.value.status, caught.value.type) == (404, "model_disabled")
    with pytest.raises(HypnosError) as caught:
        await scheduler.move("m", T1)
    assert caught.value.status == 404
    await scheduler.set_enabled("m", True)
    await use(scheduler, "m")
    with pytest.raises(HypnosError) as caught:
        await scheduler.set_enabled("nope", False)
    assert caught.value.type == "model_not_found"


async def test_move_between_tiers() -> None:
    scheduler = make_scheduler([fake_model("m", context_len=1024, slots=2), fake_model("big", layers=40)])
    state = await scheduler.move("m", T2)
    assert state.tier == T2 and state.placement.pinned_ram_bytes == 400 * 2**20
    state = await scheduler.move("m", T1, context_len=2048)
    assert state.tier == T1 and state.placement.allocated_context_len == 4096
    state = await scheduler.move("m", T1, context_len=512)
    assert state.placement.allocated_context_len == 1024
    state = await scheduler.move("m", T3)
    assert state.tier == T3 and scheduler.tiers.booked_tier1 == scheduler.tiers.booked_tier2 == 0
    with pytest.raises(HypnosError) as caught:
        await scheduler.move("big", T1)
    assert caught.value.status == 507
    with pytest.raises(HypnosError) as caught:
        await scheduler.move("nope", T1)
    assert caught.value.status == 404


async def test_move_refused_while_leased() -> None:
    scheduler = make_scheduler([fake_model("m")])
    async with scheduler.lease("m", TEXT):
        with pytest.raises(HypnosError) as caught:
            await scheduler.move("m", T3)
    assert (caught.value.status, caught.value.type) == (429, "model_busy")


async def test_startup_staging_and_shutdown() -> None:
    scheduler = make_scheduler(
        [
            fake_model("hot", initial_tier="tier1_gpu_vram", load_ms=10),
            fake_model("warm", initial_tier="tier2_pinned_ram"),
            fake_model("cold"),
            fake_model("broken", initial_tier="tier1_gpu_vram", fail_load=True),
        ]
    )
    assert not scheduler.ready
    await scheduler.stage_startup()
    assert scheduler.ready
    assert [s.tier for s in scheduler.models()] == [T1, T2, T3, T3]
    await scheduler.shutdown()
    assert all(s.tier == T3 for s in scheduler.models())
    assert scheduler.tiers.booked_tier1 == scheduler.tiers.booked_tier2 == 0


async def test_moe_offload_applies_now_when_idle() -> None:
    scheduler = make_scheduler([fake_model("moe", expert_bytes_per_layer=60 * 2**20, layer_mib=40)])
    await use(scheduler, "moe")
    applies, state = await scheduler.set_moe_offload("moe", MoeOffload.ON)
    assert applies == "now" and state.tier == T2
    await use(scheduler, "moe")
    assert state.placement.cpu_expert_layers == 4
    async with scheduler.lease("moe", TEXT):
        applies, _ = await scheduler.set_moe_offload("moe", MoeOffload.OFF)
    assert applies == "next_load"


async def test_a_context_grown_by_the_engine_is_booked() -> None:
    scheduler = make_scheduler([fake_model("a", context_len=1024)])
    await scheduler.stage_startup()
    await use(scheduler, "a")
    assert scheduler.get("a").placement.allocated_context_len == 1024
    before = scheduler.tiers.booked_tier1
    # the engine rebuilds its context on its worker thread and says so; the booking follows on the loop
    await asyncio.to_thread(scheduler.context.context_resized, "a", 4096)
    await asyncio.sleep(0.01)
    placement = scheduler.get("a").placement
    assert placement.allocated_context_len == 4096
    assert scheduler.tiers.booked_tier1 - before == 1024 * (4096 - 1024)  # 1 KiB of KV per token
    assert scheduler.status().tier1_vram_used_bytes == scheduler.tiers.booked_tier1
    await scheduler.move("a", T2)
    scheduler.context.context_resized("a", 8192)  # a model out of tier 1 books nothing
    assert scheduler.get("a").placement.allocated_context_len == 0
