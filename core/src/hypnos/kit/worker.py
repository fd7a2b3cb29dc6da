"""The one thread a resident model runs its blocking library calls on, so none of them runs on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class ModelWorker:
    """A single worker thread per model, created on first use and again after close().

    Calls run one at a time in submission order, so a tier move submitted while a (cancelled) request still runs
    waits for that request's call to return first.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, function: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Start function(*args) on the worker; an awaitable future of the running loop."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
        return asyncio.get_running_loop().run_in_executor(self._pool, function, *args)

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run function(*args) on the worker and wait for its result."""
        return await self.submit(function, *args)

    def close(self) -> None:
        """Let the thread end once its queued work is done (a later submit starts a new one)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
