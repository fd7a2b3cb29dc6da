"""Leases below the interactive priority (batch lines): free slots only, a slot left free while interactive
requests use the model, given back when an interactive request waits, never counted ahead of one in the queue bound
or the estimated wait, and never a load evicting a model in interactive use."""

from __future__ import annotations

import asyncio

import pytest
from hypnos.errors import HypnosError
from hypnos.scheduler.lease import SlotGate
from hypnos.types import MemoryTier, Modality
from sched_kit import ManualClock, fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION
TIMEOUT = 10
BATCH = -1


async def test_a_waiting_interactive_request_takes_the_slot_of_a_batch_lease() -> None:
    scheduler = make_scheduler([fake_model("m", slots=1)])
    async with scheduler.lease("m", TEXT, priority=BATCH) as batch:
        assert not batch.yielded
        waiting = asyncio.ensure_future(scheduler.lease("m", TEXT).__aenter__())
        await asyncio.sleep(0.01)
        assert batch.yielded and batch.cancel.cancelled  # the engine stops at its next token
        assert not waiting.done()  # the slot comes back when the batch lease ends
    interactive = await asyncio.wait_for(waiting, TIMEOUT)
    assert not interactive.yielded and interactive.priority == 0


async def test_an_interactive_lease_is_never_asked_to_yield() -> None:
    scheduler = make_scheduler([fake_model("m", slots=1)], limits={"max_queue_per_model": 4})
    async with scheduler.lease("m", TEXT) as first:
        second = asyncio.ensure_future(scheduler.lease("m", TEXT).__aenter__())
        batch = asyncio.ensure_future(scheduler.lease("m", TEXT, priority=BATCH).__aenter__())
        await asyncio.sleep(0.01)
        assert not first.yielded and not first.cancel.cancelled
    got = await asyncio.wait_for(second, TIMEOUT)  # the interactive request goes first although both waited
    assert not batch.done()
    assert not got.yielded
    batch.cancel()


def test_the_gate_serves_higher_priorities_first() -> None:
    async def run() -> list[str]:
        gate = SlotGate(1)
        assert gate.try_acquire()
        order: list[str] = []

        async def take(name: str, priority: int) -> None:
            await gate.acquire(priority)
            order.append(name)
            gate.release(priority)

        tasks = [asyncio.ensure_future(take(n, p)) for n, p in (("b1", -1), ("i1", 0), ("b2", -1), ("i2", 0))]
        await asyncio.sleep(0.01)
        assert gate.queued == 4 and gate.queued_from(0) == 2
        assert not gate.try_acquire(-1)
        gate.release()
        await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
        return order

    assert asyncio.run(run()) == ["i1", "i2", "b1", "b2"]


async def test_queued_batch_lines_do_not_fill_the_interactive_queue() -> None:
    scheduler = make_scheduler([fake_model("m", slots=1)], limits={"max_queue_per_model": 1})
    async with scheduler.lease("m", TEXT):
        queued = [asyncio.ensure_future(scheduler.lease("m", TEXT, priority=BATCH).__aenter__()) for _ in range(3)]
        await asyncio.sleep(0.01)
        waiting = asyncio.ensure_future(scheduler.lease("m", TEXT).__aenter__())  # not a 429: batch lines wait behind
        await asyncio.sleep(0.01)
        assert not waiting.done()
        assert scheduler.get("m").gate.queued_from(0) == 1
    lease = await asyncio.wait_for(waiting, TIMEOUT)
    assert lease.priority == 0
    for task in queued:
        task.cancel()


async def interactive_use(scheduler, model_id: str = "m") -> None:
    async with scheduler.lease(model_id, TEXT):
        pass


async def test_batch_leases_leave_a_slot_to_a_model_in_interactive_use() -> None:
    scheduler = make_scheduler([fake_model("m", slots=3)], limits={"max_queue_per_model": 8})
    await interactive_use(scheduler)
    held = [await scheduler.lease("m", TEXT, priority=BATCH).__aenter__() for _ in range(2)]
    third = asyncio.ensure_future(scheduler.lease("m", TEXT, priority=BATCH).__aenter__())
    await asyncio.sleep(0.01)
    assert not third.done()  # the last slot stays free of batch work
    async with scheduler.lease("m", TEXT) as interactive:  # taken at once: nobody had to yield
        assert interactive.priority == 0
        assert not any(lease.yielded for lease in held)
    assert not third.done()
    third.cancel()
    assert scheduler.get("m").gate.lent == 2


async def test_an_interactive_request_gets_a_slot_before_the_next_batch_line() -> None:
    scheduler = make_scheduler([fake_model("m", slots=2)], limits={"max_queue_per_model": 8})
    gate = scheduler.get("m").gate
    first = scheduler.lease("m", TEXT, priority=BATCH)
    second = scheduler.lease("m", TEXT, priority=BATCH)
    held = [await first.__aenter__(), await second.__aenter__()]  # no interactive use yet: every slot lent
    queued = asyncio.ensure_future(scheduler.lease("m", TEXT, priority=BATCH).__aenter__())
    waiting = asyncio.ensure_future(scheduler.lease("m", TEXT).__aenter__())
    await asyncio.sleep(0.01)
    assert [lease.yielded for lease in held].count(True) == 1  # one line gives its slot back at its next token
    context = first if held[0].yielded else second
    await context.__aexit__(None, None, None)
    interactive = await asyncio.wait_for(waiting, TIMEOUT)  # the interactive request, not the queued line
    assert interactive.priority == 0 and not queued.done()
    assert (gate.in_use, gate.lent) == (2, 1)
    queued.cancel()


async def test_the_reserve_lapses_when_interactive_use_ends() -> None:
    clock = ManualClock()
    scheduler = make_scheduler([fake_model("m", slots=2)], clock=clock, server={"batch_interactive_secs": 60})
    await interactive_use(scheduler)
    async with scheduler.lease("m", TEXT, priority=BATCH):
        assert not scheduler.get("m").gate.try_acquire(BATCH)
        clock.advance(61)  # nobody interactive for a minute: batch work may take every slot
        assert scheduler.get("m").gate.try_acquire(BATCH)
        scheduler.get("m").gate.release(BATCH)


async def test_a_batch_line_never_evicts_a_model_in_interactive_use() -> None:
    clock = ManualClock()
    whole = {"min_gpu_layer_ratio": 1.0}
    scheduler = make_scheduler(  # 1024 MiB tier 1: two 401 MiB models fit, not three
        [fake_model("a"), fake_model("b"), fake_model("batch")], clock=clock, hardware=whole
    )
    await interactive_use(scheduler, "a")
    await interactive_use(scheduler, "b")
    with pytest.raises(HypnosError) as caught:
        async with scheduler.lease("batch", TEXT, priority=BATCH):
            pass
    assert (caught.value.status, caught.value.retry_after) == (503, 5)  # the line runs later
    assert [s.tier for s in scheduler.models()] == [MemoryTier.TIER1, MemoryTier.TIER1, MemoryTier.TIER3]
    assert scheduler.counters.evictions == 0 and scheduler.counters.load_failures == 0
    clock.advance(scheduler.settings.server.batch_interactive_secs + 1)  # both idle for the window: evictable
    async with scheduler.lease("batch", TEXT, priority=BATCH) as lease:
        assert lease.evicted_models == ["a"]


async def test_an_interactive_load_is_not_held_back_by_a_batch_lines_refusal() -> None:
    scheduler = make_scheduler(
        [fake_model("a"), fake_model("b"), fake_model("c", slots=2)], hardware={"min_gpu_layer_ratio": 1.0}
    )
    await interactive_use(scheduler, "a")
    await interactive_use(scheduler, "b")
    batch = asyncio.ensure_future(scheduler.lease("c", TEXT, priority=BATCH).__aenter__())
    for _ in range(10):
        if scheduler.get("c").transition is not None:
            break
        await asyncio.sleep(0)
    assert scheduler.get("c").transition is not None  # the batch line's load, about to be refused
    async with scheduler.lease("c", TEXT) as lease:  # shares it, then loads the model itself: it may evict
        assert lease.evicted_models == ["a"]
    with pytest.raises(HypnosError) as caught:
        await batch
    assert caught.value.status == 503
