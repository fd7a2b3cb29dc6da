"""Passes of every request on one model go through together: while a batch runs, the next one gathers."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hypnos.engine import CancelToken
from hypnos.kit.staged import Cancelled

logger = logging.getLogger(__name__)

P = TypeVar("P")
R = TypeVar("R")


@dataclass
class _Pending(Generic[P, R]):
    item: P
    cancel: CancelToken
    future: asyncio.Future[R] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class PassBatcher(Generic[P, R]):
    """Queues passes from any number of requests and runs them `max_batch` at a time, in arrival order.

    `run_batch` (awaitable, e.g. a call on the model's worker thread) takes a list of passes and returns their
    results in order. A request whose CancelToken is set loses its passes still queued at the next batch.
    """

    def __init__(self, run_batch: Callable[[list[P]], Awaitable[list[R]]], max_batch: int) -> None:
        self._run_batch = run_batch
        self.max_batch = max(1, max_batch)
        self._queue: deque[_Pending[P, R]] = deque()
        self._drain: asyncio.Task[None] | None = None
        self.batches_run = 0
        self.largest_batch = 0

    async def run(self, items: list[P], cancel: CancelToken) -> list[R]:
        """The results of these passes, in order (they may share batches with other requests' passes)."""
        if cancel.cancelled:
            raise Cancelled()
        pending = [_Pending[P, R](item, cancel) for item in items]
        self._queue.extend(pending)
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._drain_queue(), name="gliner-batcher")
        try:
            return list(await asyncio.gather(*(p.future for p in pending)))
        except BaseException:
            for p in pending:
                p.future.cancel()
            raise

    async def _drain_queue(self) -> None:
        try:
            await self._drain_batches()
        finally:  # the task was cancelled (shutdown): nobody may wait forever
            while self._queue:
                entry = self._queue.popleft()
                if not entry.future.done():
                    entry.future.set_exception(Cancelled())

    async def _drain_batches(self) -> None:
        while self._queue:
            batch: list[_Pending[P, R]] = []
            live: dict[int, bool] = {}  # each request's token is checked once per batch
            while self._queue and len(batch) < self.max_batch:
                entry = self._queue.popleft()
                if entry.future.done():
                    continue
                token = id(entry.cancel)
                if token not in live:
                    live[token] = not entry.cancel.cancelled
                if not live[token]:
                    entry.future.set_exception(Cancelled())
                    continue
                batch.append(entry)
            if not batch:
                continue
            self.batches_run += 1
            self.largest_batch = max(self.largest_batch, len(batch))
            try:
                results = await self._run_batch([entry.item for entry in batch])
            except BaseException as error:  # every pass of the batch fails with the engine's error
                failure = error if isinstance(error, Exception) else Cancelled()
                for entry in batch:
                    if not entry.future.done():
                        entry.future.set_exception(failure)
                if not isinstance(error, Exception):
                    raise
                continue
            for entry, result in zip(batch, results, strict=True):
                if not entry.future.done():
                    entry.future.set_result(result)
