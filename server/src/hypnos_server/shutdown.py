"""SIGTERM within `shutdown_grace_secs`: new requests are refused at once, those in flight may finish until the grace
runs short, then they are ended (499 `cancelled`, a stream's error chunk; an engine host that does not let go is
killed), so that the web server's own drain completes and the models unload before the grace is over, whatever an
engine is doing. Without this, one request stuck in an engine keeps the web server draining until its kill timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RESERVE_FRACTION = 0.25  # of the grace, kept for ending what is in flight and unloading
RESERVE_MAX_SECS = 2.0


def reserve_secs(grace: float) -> float:
    """How much of the grace is kept for ending the requests in flight and unloading the models."""
    return min(RESERVE_MAX_SECS, grace * RESERVE_FRACTION)


class GracefulStop:
    """The server's stop within its grace: `begin()` at the signal, `remaining()` for the unloading that follows.

    `stop_admitting()` refuses new work at once; `end_in_flight(settle_secs)` ends what still runs when the grace
    runs short (it returns once it has)."""

    def __init__(
        self,
        grace: float,
        stop_admitting: Callable[[], None],
        end_in_flight: Callable[[float], Awaitable[Any]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grace, self.clock = grace, clock
        self._stop_admitting, self._end_in_flight = stop_admitting, end_in_flight
        self.deadline: float | None = None
        self._cut: asyncio.Task[None] | None = None

    @property
    def begun(self) -> bool:
        """Whether the stop has begun."""
        return self.deadline is not None

    def begin(self) -> None:
        """Refuse new work now; end what is still in flight when only the reserve of the grace is left."""
        if self.deadline is not None:
            return
        self.deadline = self.clock() + self.grace
        logger.info("stopping: requests in flight have %.1f s to finish", self.grace - reserve_secs(self.grace))
        self._stop_admitting()
        self._cut = asyncio.get_running_loop().create_task(self._cut_when_short(), name="hypnos-graceful-stop")

    async def _cut_when_short(self) -> None:
        reserve = reserve_secs(self.grace)
        await asyncio.sleep(max(0.0, self.remaining() - reserve))
        try:
            await self._end_in_flight(reserve / 2)
        except Exception:
            logger.exception("ending the requests in flight failed")

    def remaining(self) -> float:
        """Seconds left of the grace (the whole grace before the stop began)."""
        return self.grace if self.deadline is None else max(0.0, self.deadline - self.clock())

    async def finish(self) -> None:
        """At the app's shutdown: end what is still in flight now (the web server has stopped serving)."""
        if self._cut is not None and not self._cut.done():
            self._cut.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cut
            await self._end_in_flight(min(0.5, self.remaining() / 2))


def watch_stop_signals(loop: asyncio.AbstractEventLoop, on_signal: Callable[[], None]) -> Callable[[], None] | None:
    """Call `on_signal` on the loop when SIGTERM or SIGINT arrives, keeping the handler already installed (granian's
    worker sets its own through the loop, which dispatches by the wakeup fd; a plain handler is called after ours);
    a signal nobody handles (its default ends the process) is left alone. Only the main thread may do this: None
    (nothing installed) elsewhere, e.g. under a test client; else a function that puts the handlers back (the app
    calls it at its shutdown, so an app built again in one process does not stack handlers)."""

    def chained(previous: Callable[[int, Any], Any]) -> Callable[[int, Any], None]:
        def handler(signum: int, frame: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to stop
                loop.call_soon_threadsafe(on_signal)
            previous(signum, frame)

        return handler

    replaced: dict[int, Any] = {}
    for number in STOP_SIGNALS:
        try:
            previous = signal.getsignal(number)
            if not callable(previous):  # nobody stops gracefully on it (default: the process just ends)
                continue
            signal.signal(number, chained(previous))
        except ValueError:  # not the main thread
            break
        replaced[number] = previous

    def restore() -> None:
        for number, previous in replaced.items():
            with contextlib.suppress(ValueError):
                signal.signal(number, previous)

    return restore if replaced else None
