"""Events from the batch loop's thread to a request's coroutine, with one event-loop wakeup per burst of events."""

from __future__ import annotations

import asyncio
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class Handoff(Generic[T]):
    """`emit` from any thread; `get` on the event loop. Events emitted before the loop drains go over in one wakeup
    (one `call_soon_threadsafe`), not one thread hop per token."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list[T] = []
        self._ready: asyncio.Queue[T] = asyncio.Queue()

    def emit(self, event: T) -> None:
        """Hand one event over; wakes the loop only when none is already waiting to be drained."""
        with self._lock:
            self._pending.append(event)
            if len(self._pending) > 1:
                return
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for event in pending:
            self._ready.put_nowait(event)

    async def get(self) -> T:
        """The next event, in the order emitted."""
        return await self._ready.get()
