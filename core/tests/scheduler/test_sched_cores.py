"""The cores as a scheduled budget: shares while models compute, shown in the status, pinned models kept."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from hypnos.types import Modality
from sched_kit import fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION


def shares(scheduler) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """Each model's `cores` in /v1/memory/status."""
    return {model.id: model.cores for model in scheduler.status().models}


async def settled(scheduler) -> None:  # type: ignore[no-untyped-def]
    """Let the background tellers reach the engines."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_concurrent_leases_get_disjoint_shares_shown_in_the_status() -> None:
    scheduler = make_scheduler([fake_model("a"), fake_model("b")], cores=[0, 1, 2, 3])
    try:
        assert scheduler.status().capabilities.cpu_cores == [0, 1, 2, 3]
        async with scheduler.lease("a", TEXT):
            assert shares(scheduler) == {"a": [0, 1, 2, 3], "b": []}  # alone: every core
            async with scheduler.lease("b", TEXT):
                assert shares(scheduler) == {"a": [0, 1], "b": [2, 3]}
                await settled(scheduler)
                assert scheduler.get("a").engine.core_threads == 2  # each engine told its thread count
                assert scheduler.get("b").engine.core_threads == 2
            assert shares(scheduler) == {"a": [0, 1, 2, 3], "b": []}  # b's share went back
            await settled(scheduler)
            assert scheduler.get("a").engine.core_threads == 4
        assert shares(scheduler) == {"a": [], "b": []}
    finally:
        await scheduler.shutdown()


async def test_a_models_leases_share_one_share() -> None:
    scheduler = make_scheduler([fake_model("a", slots=2), fake_model("b")], cores=[0, 1, 2, 3])
    try:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(scheduler.lease("a", TEXT))
            await stack.enter_async_context(scheduler.lease("a", TEXT))
            await stack.enter_async_context(scheduler.lease("b", TEXT))
            assert shares(scheduler) == {"a": [0, 1], "b": [2, 3]}
    finally:
        await scheduler.shutdown()


async def test_realtime_models_come_first() -> None:
    models = [fake_model("chat"), fake_model("voice", priority="realtime_pinned")]
    scheduler = make_scheduler(models, cores=[0, 1, 2])
    try:
        async with scheduler.lease("chat", TEXT), scheduler.lease("voice", TEXT):
            assert shares(scheduler) == {"chat": [2], "voice": [0, 1]}
    finally:
        await scheduler.shutdown()


async def test_a_niced_batch_model_does_not_take_a_core_from_a_decode() -> None:
    batch = {**fake_model("docs"), "process": {"nice": 10}}  # a batch engine's host (docling, gliner) runs niced
    scheduler = make_scheduler([fake_model("chat"), batch], cores=[0, 1])
    try:
        async with scheduler.lease("docs", TEXT):
            assert shares(scheduler)["docs"] == [0, 1]  # alone it has every core
            async with scheduler.lease("chat", TEXT):
                assert shares(scheduler) == {"chat": [0, 1], "docs": [1]}  # it shares the chat's last core
                await settled(scheduler)
                assert scheduler.get("chat").engine.core_threads == 2
    finally:
        await scheduler.shutdown()


async def test_a_model_pinned_by_config_keeps_its_cores() -> None:
    pinned = {**fake_model("batch", priority="low"), "cores": [0]}
    scheduler = make_scheduler([pinned, fake_model("voice", priority="realtime_pinned")], cores=[0, 1, 2, 3])
    try:
        async with scheduler.lease("voice", TEXT):
            assert shares(scheduler)["voice"] == [0, 1, 2, 3]
            async with scheduler.lease("batch", TEXT):
                assert shares(scheduler) == {"batch": [0], "voice": [1, 2, 3]}
    finally:
        await scheduler.shutdown()


async def test_share_cores_off_gives_no_shares() -> None:
    scheduler = make_scheduler([fake_model("a")], hardware={"share_cores": False}, cores=[0, 1])
    try:
        async with scheduler.lease("a", TEXT):
            assert shares(scheduler) == {"a": []}
            await settled(scheduler)
            assert scheduler.get("a").engine.core_threads is None
    finally:
        await scheduler.shutdown()


async def test_an_engine_hears_whether_it_computes_alone() -> None:
    pinned = {**fake_model("batch"), "cores": [0]}
    scheduler = make_scheduler([pinned, fake_model("chat")], cores=[0, 1])
    try:
        async with scheduler.lease("batch", TEXT):
            await settled(scheduler)
            batch = scheduler.get("batch").engine
            assert batch.core_threads == 1 and batch.core_alone
            async with scheduler.lease("chat", TEXT):
                await settled(scheduler)
                assert batch.core_threads == 1 and not batch.core_alone  # the same share, another model beside it
                assert not scheduler.get("chat").engine.core_alone
            await settled(scheduler)
            assert batch.core_alone
    finally:
        await scheduler.shutdown()
