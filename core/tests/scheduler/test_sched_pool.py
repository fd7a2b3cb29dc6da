"""Adding, replacing and removing models of a running scheduler: draining, waiting requests, serialization."""

from __future__ import annotations

import asyncio

import pytest
from hypnos.config import settings_from_mapping
from hypnos.errors import HypnosError
from hypnos.types import MemoryTier, Modality
from sched_kit import fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION


def model_config(model_id: str, **fake):  # type: ignore[no-untyped-def]
    return settings_from_mapping({"models": [fake_model(model_id, **fake)]}).models[0]


def test_added_model_starts_in_tier3_whatever_its_initial_tier_and_serves() -> None:
    async def scenario() -> None:
        scheduler = make_scheduler([fake_model("a")])
        await scheduler.stage_startup()
        state = await scheduler.pool.add(model_config("b", initial_tier="tier1_gpu_vram"))
        assert state.tier == MemoryTier.TIER3 and scheduler.get("b") is state
        async with scheduler.lease("b", TEXT) as lease:
            assert lease.engine is state.engine
        assert [s.id for s in scheduler.models()] == ["a", "b"]
        with pytest.raises(HypnosError) as taken:
            await scheduler.pool.add(model_config("b"))
        assert taken.value.status == 400 and "taken" in taken.value.message

    asyncio.run(scenario())


def test_replace_waits_for_the_running_request_and_serves_the_waiting_one_with_the_new_model() -> None:
    async def scenario() -> None:
        scheduler = make_scheduler([fake_model("a")])
        await scheduler.stage_startup()
        old = scheduler.get("a")
        release = asyncio.Event()
        seen: list[object] = []

        async def running() -> None:
            async with scheduler.lease("a", TEXT) as lease:
                seen.append(lease.engine)
                await release.wait()

        async def arriving() -> None:
            async with scheduler.lease("a", TEXT) as lease:
                seen.append(lease.engine)

        first = asyncio.create_task(running())
        await asyncio.sleep(0.01)
        change = asyncio.create_task(scheduler.pool.replace("a", model_config("a", layers=2), 10.0))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(arriving())
        await asyncio.sleep(0.05)
        assert not change.done() and not second.done()  # the change drains; the new request waits
        release.set()
        new = await change
        await asyncio.gather(first, second)
        assert seen == [old.engine, new.engine]
        assert old.tier == MemoryTier.TIER3 and old.booked.vram_bytes == 0
        assert scheduler.tiers.booked_tier1 == sum(s.booked.vram_bytes for s in scheduler.models())

    asyncio.run(scenario())


def test_drain_expiry_answers_model_busy_and_keeps_the_old_model() -> None:
    async def scenario() -> None:
        scheduler = make_scheduler([fake_model("a")])
        await scheduler.stage_startup()
        old = scheduler.get("a")
        async with scheduler.lease("a", TEXT):
            with pytest.raises(HypnosError) as busy:
                await scheduler.pool.replace("a", model_config("a", layers=2), 0.05)
            assert busy.value.status == 429 and busy.value.type == "model_busy"
            with pytest.raises(HypnosError):
                await scheduler.pool.remove("a", 0.0)
        assert scheduler.get("a") is old
        async with scheduler.lease("a", TEXT) as lease:
            assert lease.engine is old.engine

    asyncio.run(scenario())


def test_remove_unloads_and_the_waiting_requests_get_404() -> None:
    async def scenario() -> None:
        scheduler = make_scheduler([fake_model("a"), fake_model("b")])
        await scheduler.stage_startup()
        release = asyncio.Event()

        async def running() -> None:
            async with scheduler.lease("a", TEXT):
                await release.wait()

        first = asyncio.create_task(running())
        await asyncio.sleep(0.01)
        removal = asyncio.create_task(scheduler.pool.remove("a", 10.0))
        await asyncio.sleep(0.01)
        waiting = asyncio.create_task(scheduler.lease("a", TEXT).__aenter__())
        await asyncio.sleep(0.02)
        release.set()
        removed = await removal
        await first
        with pytest.raises(HypnosError) as gone:
            await waiting
        assert gone.value.status == 404 and gone.value.type == "model_not_found"
        assert removed.tier == MemoryTier.TIER3 and [s.id for s in scheduler.models()] == ["b"]
        assert scheduler.tiers.booked_tier1 == scheduler.get("b").booked.vram_bytes

    asyncio.run(scenario())


def test_racing_changes_to_one_id_run_one_after_the_other() -> None:
    async def scenario() -> None:
        scheduler = make_scheduler([fake_model("a")])
        await scheduler.stage_startup()
        order: list[str] = []

        def committer(name: str):  # type: ignore[no-untyped-def]
            async def commit() -> None:
                order.append(f"{name} start")
                await asyncio.sleep(0.02)
                order.append(f"{name} end")

            return commit

        results = await asyncio.gather(
            scheduler.pool.replace("a", model_config("a", layers=2), 5.0, committer("replace")),
            scheduler.pool.remove("a", 5.0, committer("remove")),
            scheduler.pool.add(model_config("a", layers=3), committer("add")),
            return_exceptions=True,
        )
        assert order == ["replace start", "replace end", "remove start", "remove end", "add start", "add end"]
        assert not any(isinstance(r, BaseException) for r in results)
        assert scheduler.get("a").estimate().num_layers == 3

    asyncio.run(scenario())


def test_a_failing_engine_is_refused_before_anything_changes() -> None:
    async def scenario() -> None:
        scheduler = make_scheduler([fake_model("a")])
        broken = model_config("a")
        broken.engine = "missing"
        with pytest.raises(HypnosError) as refused:
            await scheduler.pool.replace("a", broken, 1.0)
        assert refused.value.status == 400 and "missing" in refused.value.message
        assert scheduler.get("a").config.engine == "fake"

    asyncio.run(scenario())
