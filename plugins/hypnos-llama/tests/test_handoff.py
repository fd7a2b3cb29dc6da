"""The batch loop's events reach the request in order, a burst in one event-loop wakeup."""

from __future__ import annotations

import asyncio
import threading

from hypnos_llama.handoff import Handoff


async def test_events_from_a_thread_arrive_complete_and_in_order() -> None:
    handoff: Handoff[int] = Handoff(asyncio.get_running_loop())
    producer = threading.Thread(target=lambda: [handoff.emit(i) for i in range(2000)])
    producer.start()
    received = [await handoff.get() for _ in range(2000)]
    producer.join()
    assert received == list(range(2000))


async def test_a_burst_emitted_while_the_loop_is_busy_wakes_it_once() -> None:
    loop = asyncio.get_running_loop()
    wakeups = []
    real = loop.call_soon_threadsafe

    def counting(callback, *args):  # type: ignore[no-untyped-def]
        wakeups.append(callback)
        return real(callback, *args)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        handoff: Handoff[str] = Handoff(loop)
        producer = threading.Thread(target=lambda: [handoff.emit(token) for token in ("a", "b", "c", "d")])
        producer.start()
        producer.join()  # the loop did not run meanwhile: all four wait for one drain
        assert [await handoff.get() for _ in range(4)] == ["a", "b", "c", "d"]
        assert len(wakeups) == 1
    finally:
        del loop.call_soon_threadsafe
