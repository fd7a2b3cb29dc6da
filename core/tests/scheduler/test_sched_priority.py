"""Leases below the interactive priority (batch lines): free slots only, given back when an interactive request
waits, never counted ahead of one in the queue bound or the estimated wait."""

from __future__ import annotations

import asyncio

from hypnos.scheduler.lease import SlotGate
from hypnos.types import Modality
from sched_kit import fake_model, make_scheduler

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
            gate.release()

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
