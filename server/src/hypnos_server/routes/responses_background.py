"""What a background response (`background: true`) keeps apart from its request: its event log, its stop switch,
and the request record it finishes on its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from litestar.types import HTTPDisconnectEvent

from hypnos_server.state import HypnosState, RequestContext, RequestRecord, new_request_id


class EventLog:
    """Every SSE event of one background response, in sequence order (event i has sequence_number i), so that a
    stream can follow it live or resume after a sequence number."""

    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.done = False
        self._changed = asyncio.Event()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def add(self, chunk: bytes) -> None:
        """Keep one event and wake the followers."""
        self.events.append(chunk)
        self._wake()

    async def record(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Pass `chunks` (one event each) through, keeping each."""
        async for chunk in chunks:
            self.add(chunk)
            yield chunk

    def close(self) -> None:
        """No more events will come; followers end after the last one."""
        self.done = True
        self._wake()

    async def follow(self, starting_after: int = -1) -> AsyncIterator[bytes]:
        """The events after sequence number `starting_after`, then the new ones as they come, to the last."""
        index = starting_after + 1
        while True:
            waiter = self._changed
            if index < len(self.events):
                chunk, index = b"".join(self.events[index:]), len(self.events)
                yield chunk
                continue
            if self.done:
                return
            await waiter.wait()


class StopSwitch:
    """Stands for the client of a background run: its `http.disconnect` arrives when the response is cancelled."""

    def __init__(self) -> None:
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """Cancel: a run still waiting for its lease leaves the queue."""
        self._stop.set()

    async def receive(self) -> HTTPDisconnectEvent:
        """An ASGI receive that answers once, at the stop."""
        await self._stop.wait()
        return {"type": "http.disconnect"}


def detached_context(request_context: RequestContext) -> RequestContext:
    """A context of its own for a background run (same key), whose record is the generation's; it takes the
    request's concurrency slot along, so that the key's max_concurrent counts the run until it ends."""
    outer = request_context.record
    record = RequestRecord(
        id=new_request_id(),
        method=outer.method,
        path=outer.path,
        started_at=time.time(),
        route=outer.route or outer.path,
        key=outer.key,
        model=outer.model,
        workflow=outer.workflow,
    )
    return RequestContext(record=record, key=request_context.key, release_permit=request_context.take_permit())


async def finish_detached(state: HypnosState, context: RequestContext, status: int) -> None:
    """Run a background run's closers, then end its record as the pipeline ends a request's (the key's concurrency
    slot given back, its tokens charged, observers told)."""
    await context.run_closers()
    context.record.status = status
    context.finish(state.limiter)
    state.notify(context.record)
