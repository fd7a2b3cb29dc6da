"""Changing the model pool while it serves: add, replace and remove a model's state, draining the old one first."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from hypnos.config import ConfigError, ModelConfig
from hypnos.errors import invalid_request, model_busy, model_not_found
from hypnos.scheduler.kv_park import KvParkStore
from hypnos.scheduler.model_state import ModelState
from hypnos.scheduler.tiers import TierManager
from hypnos.types import MemoryTier

logger = logging.getLogger(__name__)

DRAIN_POLL_SECS = 0.01

Commit = Callable[[], Awaitable[Any]]


async def _no_commit() -> None:
    return None


class PoolChanges:
    """Adds, replaces and removes models of a running scheduler; changes to one id run one after the other.

    While a model is replaced or removed, new requests for its id wait (`wait_turn`), running ones finish on the old
    state, which is then unloaded; only then is the id pointed at the new state (or dropped), so no request ever sees
    a half-replaced model. `commit` (e.g. writing the overlay) runs after the change, still in the id's turn, so
    that what is recorded follows the order of the changes.
    """

    def __init__(
        self,
        models: dict[str, ModelState],
        tiers: TierManager,
        kv_park: KvParkStore,
        make_state: Callable[[ModelConfig], ModelState],
    ) -> None:
        self._models = models
        self._tiers = tiers
        self._kv_park = kv_park
        self._make_state = make_state
        self._locks: dict[str, asyncio.Lock] = {}
        self._holds: dict[str, asyncio.Event] = {}

    def held(self, model_id: str) -> bool:
        """True while a replacement or removal of `model_id` is draining it."""
        return model_id in self._holds

    async def wait_turn(self, model_id: str) -> None:
        """Wait while the model is being replaced or removed (returns at once, without yielding, otherwise)."""
        while (hold := self._holds.get(model_id)) is not None:
            await hold.wait()

    def _lock(self, model_id: str) -> asyncio.Lock:
        return self._locks.setdefault(model_id, asyncio.Lock())

    def _build(self, model: ModelConfig) -> ModelState:
        """A fresh tier-3 state for `model`; 400 when its engine cannot be built or its option tables are bad."""
        try:
            state = self._make_state(model)
        except ConfigError as error:
            raise invalid_request(str(error)) from None
        if state.engine is None:
            raise invalid_request(state.unavailable_reason or f"the model `{model.id}` cannot be served")
        return state

    async def add(self, model: ModelConfig, commit: Commit = _no_commit) -> ModelState:
        """Add a model (cold, in tier 3); 400 when its id is taken."""
        async with self._lock(model.id):
            if model.id in self._models:
                raise invalid_request(f"the model id `{model.id}` is taken; PUT /v1/models/{model.id} replaces it")
            state = self._build(model)
            self._models[model.id] = state
            await commit()
            return state

    async def replace(
        self, model_id: str, model: ModelConfig, drain_secs: float, commit: Commit = _no_commit
    ) -> ModelState:
        """Replace the model `model_id` by `model` (same id) once the old one drained; 429 past drain_secs."""
        async with self._lock(model_id):
            if model_id not in self._models:
                raise model_not_found(model_id)
            new = self._build(model)
            async with self._hold(model_id):
                await self._retire(self._models[model_id], drain_secs)
                self._models[model_id] = new
            await commit()
            return new

    async def remove(self, model_id: str, drain_secs: float, commit: Commit = _no_commit) -> ModelState:
        """Remove the model once it drained (its waiting requests then get 404); 429 past drain_secs."""
        async with self._lock(model_id):
            old = self._models.get(model_id)
            if old is None:
                raise model_not_found(model_id)
            async with self._hold(model_id):
                await self._retire(old, drain_secs)
                del self._models[model_id]
            await commit()
            return old

    @asynccontextmanager
    async def _hold(self, model_id: str) -> AsyncIterator[None]:
        event = asyncio.Event()
        self._holds[model_id] = event
        try:
            yield
        finally:
            del self._holds[model_id]
            event.set()

    async def _retire(self, old: ModelState, drain_secs: float) -> None:
        """Wait for the running requests to finish (429 model_busy past drain_secs), then unload the old engine."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, drain_secs)
        while old.busy or old.transition is not None:
            if loop.time() >= deadline:
                raise model_busy(
                    f"the model `{old.id}` still had {old.active_leases} running and {old.waiting} queued requests "
                    f"after drain_secs ({drain_secs:g} s); nothing was changed"
                )
            await asyncio.sleep(DRAIN_POLL_SECS)
        if old.engine is not None:
            await self._tiers.ensure(old, MemoryTier.TIER3, exclusive=True)
        self._kv_park.drop(old.id)
        logger.info("model %s drained and unloaded", old.id)
