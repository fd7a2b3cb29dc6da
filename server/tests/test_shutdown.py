"""The stop at SIGTERM: new work refused at once, what is in flight ended when the grace runs short, and the signal
handler chained onto the one already installed (granian's worker has its own)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from hypnos_server.shutdown import GracefulStop, reserve_secs, watch_stop_signals


async def wait_for(condition, within: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_the_stop_refuses_new_work_at_once_and_ends_what_runs_when_only_the_reserve_is_left() -> None:
    events: list[tuple[str, float]] = []

    async def end_in_flight(settle_secs: float) -> None:
        events.append(("end", settle_secs))

    stop = GracefulStop(2.0, lambda: events.append(("refuse", 0.0)), end_in_flight)
    assert stop.remaining() == 2.0 and not stop.begun
    stop.begin()
    stop.begin()  # a second signal changes nothing
    assert events == [("refuse", 0.0)]
    assert stop.begun and stop.remaining() <= 2.0
    assert await wait_for(lambda: len(events) == 2)
    assert events[1] == ("end", reserve_secs(2.0) / 2)
    assert stop.remaining() <= reserve_secs(2.0)  # the cut came when only the reserve was left
    await stop.finish()
    assert len(events) == 2  # already ended: finish does not end it twice


async def test_an_app_shutdown_before_the_cut_ends_what_is_in_flight_at_once() -> None:
    ended: list[float] = []

    async def end_in_flight(settle_secs: float) -> None:
        ended.append(settle_secs)

    stop = GracefulStop(60.0, lambda: None, end_in_flight)
    stop.begin()
    await stop.finish()
    assert len(ended) == 1 and ended[0] <= 0.5


async def test_a_stop_signal_reaches_the_server_and_the_handler_installed_before_it() -> None:
    received: list[int] = []
    ours: list[bool] = []
    saved_int = signal.getsignal(signal.SIGINT)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        restore = watch_stop_signals(asyncio.get_running_loop(), lambda: ours.append(True))
        assert restore is not None
        os.kill(os.getpid(), signal.SIGTERM)
        assert await wait_for(lambda: bool(ours) and bool(received))
        assert received == [signal.SIGTERM]
        restore()  # the handler installed before is back alone
        os.kill(os.getpid(), signal.SIGTERM)
        assert await wait_for(lambda: len(received) == 2)
        await asyncio.sleep(0.05)
        assert ours == [True]
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, saved_int)


async def test_a_signal_nobody_handles_is_left_to_its_default() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    saved_int = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        assert watch_stop_signals(asyncio.get_running_loop(), lambda: None) is None
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, saved_int)
