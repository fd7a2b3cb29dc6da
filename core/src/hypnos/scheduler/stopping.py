"""Stopping the scheduler: refuse new leases, end the ones in flight, unload every model within a bound.

A server that is told to stop (SIGTERM) first lets the requests in flight finish while it refuses new ones; when its
grace runs short it ends them: every lease's cancellation token is set (an engine stops at its next check and the
client gets 499 `cancelled`, a stream its error chunk), and an engine host that has not let go of its requests
shortly after is killed (its requests then end with the host's error), whatever its engine is doing. Unloading
afterwards is bounded too: hosts still running when it runs out are killed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from hypnos.errors import HypnosError
from hypnos.hosting import HostedEngine
from hypnos.scheduler.lease import Lease
from hypnos.scheduler.model_state import ModelState
from hypnos.scheduler.tiers import TierManager
from hypnos.types import MemoryTier

logger = logging.getLogger(__name__)

SETTLE_POLL_SECS = 0.02


def shutting_down() -> HypnosError:
    """503 for a request that arrives (or reaches the front of its queue) while the server is stopping."""
    return HypnosError(
        503,
        "model_not_available",
        "the server is shutting down; retry shortly (on another instance, or once it is back)",
        retry_after=5,
    )


async def end_in_flight(leases: set[Lease], models: Iterable[ModelState], settle_secs: float) -> int:
    """Cancel every lease in flight; after `settle_secs`, kill the engine hosts still holding one or still loading
    their model for a request (a load cannot be cancelled; the requests waiting on it then get 503). Returns how many
    leases were ended."""
    ended = list(leases)
    for lease in ended:
        lease.cancel.cancel()
    deadline = time.monotonic() + settle_secs
    while leases and time.monotonic() < deadline:  # noqa: ASYNC110 (leases end on their own tasks)
        await asyncio.sleep(SETTLE_POLL_SECS)
    stuck = {lease.model_id for lease in leases}
    hosted = [
        state.engine
        for state in models
        if isinstance(state.engine, HostedEngine) and (state.id in stuck or _moving(state))
    ]
    for engine in hosted:
        logger.error(
            "the engine host of %s is still busy (a request or a load) at shutdown; killing it", engine.model.id
        )
    await asyncio.gather(*(engine.kill() for engine in hosted), return_exceptions=True)
    return len(ended)


def _moving(state: ModelState) -> bool:
    """Whether the model is in a tier move (a load, for a request or a prefetch)."""
    return state.transition is not None and not state.transition.done()


async def unload_all(
    models: list[ModelState], tiers: TierManager, background: set[asyncio.Task[Any]], within: float
) -> None:
    """Stop the background moves (prefetches), then unload every model to tier 3, within `within` seconds; the
    engine hosts still running after it are killed."""
    try:
        await asyncio.wait_for(_unload(models, tiers, background), max(within, 0.0))
    except TimeoutError:
        logger.error("unloading took longer than %.1f s (shutdown_grace_secs); ending the engine hosts", within)
    hosted = [state.engine for state in models if isinstance(state.engine, HostedEngine)]
    await asyncio.gather(*(engine.kill() for engine in hosted), return_exceptions=True)


async def _unload(models: list[ModelState], tiers: TierManager, background: set[asyncio.Task[Any]]) -> None:
    for task in list(background):
        task.cancel()
    if background:
        await asyncio.gather(*background, return_exceptions=True)
    for state in models:
        try:
            await tiers.settle(state)
        except Exception:
            pass
        if state.engine is not None and state.tier != MemoryTier.TIER3:
            try:
                await tiers.ensure(state, MemoryTier.TIER3)
            except Exception:
                logger.exception("unloading %s at shutdown failed", state.id)
