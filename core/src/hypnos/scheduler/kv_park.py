"""KV parking (section 14): host-memory copies of a model's per-slot KV states, kept while the model is out of tier 1.

Engines park when a model leaves tier 1 and take their states back when it returns with the same context layout.
The store caps the bytes held (the least recently parked models go first) and is safe to call from worker threads.
Parked bytes are host memory: the scheduler counts them in tier 2 and against the process cap, tells the store how
much of those budgets its bookings leave (`budget`), and drops parked states (`release`) before it evicts a model.
The prompt cache's RAM tier is booked through this store too: its bytes count in `used_bytes`, it gets the room the
models and the parked states leave, and `release` drops its RAM copies (they stay on disk) before parked states.
An engine with a prompt cache (llama) parks through it: its parked states are prompt cache entries held under this
store's switch and cap (found again by prefix on the conversation's next turn); this store's own park/take keep the
slots of an engine without one. Both kinds show, count and give way here alike, the least recently parked first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from hypnos.config import KvParkConfig
from hypnos.engine import ParkedSlot
from hypnos.scheduler.prompt_cache import ParkedStates, PromptCacheStore
from hypnos.scheduler.status_types import KvParkedModel, KvParkStatus

logger = logging.getLogger(__name__)


@dataclass
class ParkedModel:
    """A model's parked slots and the context layout they were saved from."""

    layout: Hashable
    slots: list[ParkedSlot]
    parked_at: float
    bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.bytes = sum(len(slot.state) for slot in self.slots)


class KvParkStore:
    """The contract's KvPark: parked KV states of all models under one byte cap ([hardware.kv_park], POST kv-park)."""

    def __init__(
        self,
        config: KvParkConfig,
        clock: Callable[[], float] = time.monotonic,
        budget: Callable[[], int] | None = None,
    ) -> None:
        self.enabled = config.enabled
        self.max_bytes = config.max_bytes
        self._clock = clock
        self._budget = budget
        self._models: dict[str, ParkedModel] = {}
        self.prompt_cache: PromptCacheStore | None = None
        # Held by the scheduler while it books, so that a park from a worker thread sees whole bookings.
        self.lock = threading.RLock()

    def bind_budget(self, budget: Callable[[], int]) -> None:
        """Where the host bytes left for parked state come from (the scheduler's tier-2 and process books)."""
        self._budget = budget

    def attach_prompt_cache(self, cache: PromptCacheStore) -> None:
        """Book the prompt cache's RAM tier with the parked states, and park through it (the module's docstring)."""
        self.prompt_cache = cache
        cache.bind_room(self._prompt_cache_room)
        cache.bind_parking(self._parking_room, self._clock)

    def _parking_room(self) -> int:
        """What the prompt cache's parked states may hold: none while off (read without the lock, as below)."""
        if not self.enabled:
            return 0
        return max(0, self._limit() - sum(parked.bytes for parked in list(self._models.values())))

    def _prompt_cache_room(self) -> int:
        """What the budgets leave the prompt cache (read without the lock: the cache may hold its own)."""
        parked = sum(parked.bytes for parked in list(self._models.values()))
        budget = self._budget() if self._budget is not None else 1 << 62
        return max(0, budget - parked)

    @property
    def parked_bytes(self) -> int:
        """Bytes of parked state held now (the prompt cache's parked states included)."""
        with self.lock:
            cache = self.prompt_cache.parked_bytes if self.prompt_cache is not None else 0
            return sum(parked.bytes for parked in self._models.values()) + cache

    @property
    def used_bytes(self) -> int:
        """Host bytes booked here: parked states plus the prompt cache's RAM tier."""
        with self.lock:
            cache = self.prompt_cache.ram_bytes if self.prompt_cache is not None else 0
            return sum(parked.bytes for parked in self._models.values()) + cache

    def park(self, model_id: str, layout: Hashable, slots: list[ParkedSlot]) -> bool:
        """Keep these slots for the model (replacing what it had parked); False when off, empty, or larger than the
        cap or than what the tier-2 and process budgets leave (older parked states give way first, models never)."""
        parked = ParkedModel(layout=layout, slots=slots, parked_at=self._clock())
        with self.lock:
            self._models.pop(model_id, None)
            limit = self._limit()
            if not self.enabled or not slots or parked.bytes > limit:
                if slots and self.enabled:
                    logger.info("not parking %s: %d bytes, %d bytes of room", model_id, parked.bytes, limit)
                return False
            self._models[model_id] = parked
            self._fit(limit)
            return model_id in self._models

    def take(self, model_id: str, layout: Hashable) -> list[ParkedSlot]:
        """The model's parked slots, removed from the store; none when the layout changed (they are dropped)."""
        with self.lock:
            parked = self._models.pop(model_id, None)
        if parked is None or parked.layout != layout:
            return []
        return parked.slots

    def drop(self, model_id: str) -> None:
        """Forget a model's parked state and saved prompt states (a disabled or deleted model)."""
        with self.lock:
            self._models.pop(model_id, None)
            if self.prompt_cache is not None:
                self.prompt_cache.drop(model_id)

    def release(self, num_bytes: int) -> list[str]:
        """Drop the prompt cache's RAM copies, then the least recently parked models, until `num_bytes` are freed (or
        none is left); the parked models' ids (and "prompt cache" when it gave way)."""
        dropped = []
        with self.lock:
            if self.prompt_cache is not None and num_bytes > 0:
                freed = self.prompt_cache.release_ram(num_bytes)
                num_bytes -= freed
                if freed:
                    dropped.append("prompt cache")
            while num_bytes > 0 and (oldest := self._oldest()) is not None:
                num_bytes -= self._drop_parked(oldest)
                dropped.append(oldest)
        return dropped

    def configure(self, *, enabled: bool | None = None, max_bytes: int | None = None) -> None:
        """Turn parking on or off (off drops everything) and set the cap (the oldest go until the rest fits)."""
        with self.lock:
            if enabled is not None:
                self.enabled = enabled
            if max_bytes is not None:
                self.max_bytes = max_bytes
            if not self.enabled:
                self._models.clear()
                for held in self._cache_parked():
                    self._drop_parked(held.model)
            self._fit(self.max_bytes)

    def _limit(self) -> int:
        """The bytes parked state may hold: the cap, or less when the budgets' bookings leave less (lock held)."""
        if self._budget is None:
            return self.max_bytes
        return max(0, min(self.max_bytes, self._budget()))

    def _cache_parked(self) -> list[ParkedStates]:
        return self.prompt_cache.parked_models() if self.prompt_cache is not None else []

    def _oldest(self) -> str | None:
        """The model parked least recently, here or in the prompt cache (lock held)."""
        times = {model_id: parked.parked_at for model_id, parked in self._models.items()}
        for held in self._cache_parked():
            times[held.model] = min(times.get(held.model, held.parked_at), held.parked_at)
        return min(times, key=lambda model_id: times[model_id]) if times else None

    def _drop_parked(self, model_id: str) -> int:
        """Drop a model's parked states (the prompt cache's stay on disk where written); the bytes freed."""
        parked = self._models.pop(model_id, None)
        freed = parked.bytes if parked is not None else 0
        return freed + (self.prompt_cache.release_parked(model_id) if self.prompt_cache is not None else 0)

    def _fit(self, limit: int) -> None:
        """Drop the least recently parked models until the rest fits `limit` (lock held)."""
        while self.parked_bytes > limit and (oldest := self._oldest()) is not None:
            self._drop_parked(oldest)

    def status(self) -> KvParkStatus:
        """The kv_park object of /v1/memory/status and /v1/memory/kv-park."""
        now = self._clock()
        with self.lock:
            models = [
                KvParkedModel(
                    model=model_id,
                    slots=len(parked.slots),
                    tokens=sum(len(slot.tokens) for slot in parked.slots),
                    bytes=parked.bytes,
                    parked_secs_ago=round(max(0.0, now - parked.parked_at), 3),
                )
                for model_id, parked in self._models.items()
            ]
            models += [
                KvParkedModel(
                    model=held.model,
                    slots=held.slots,
                    tokens=held.tokens,
                    bytes=held.bytes,
                    parked_secs_ago=round(max(0.0, now - held.parked_at), 3),
                )
                for held in self._cache_parked()
            ]
        models.sort(key=lambda model: -model.parked_secs_ago)
        used = sum(model.bytes for model in models)
        return KvParkStatus(enabled=self.enabled, max_bytes=self.max_bytes, used_bytes=used, models=models)
