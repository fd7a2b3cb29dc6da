"""A lease: the right to use one model for one request, with what it cost to get it; and the per-model slot gate."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from hypnos.engine import CancelToken, DeviceOutOfMemory, Engine
from hypnos.engine_io import ChatAccepted
from hypnos.kit.device_oom import out_of_memory
from hypnos.types import EngineTiming, HypnosTelemetry, LayerPlacementPlan, MemoryTier, Modality, TierSwitchPhases

T = TypeVar("T")


@dataclass(eq=False)  # leases are told apart by identity (the scheduler keeps a set of those in flight)
class Lease:
    """Held for the whole request (a stream: until its last byte); the model cannot be evicted meanwhile."""

    model_id: str
    engine: Engine
    previous_tier: MemoryTier
    placement: LayerPlacementPlan
    tier_switch_latency_ms: float = 0.0
    evicted_models: list[str] = field(default_factory=list)
    tier_switch_phases: TierSwitchPhases | None = None
    estimated_wait_ms: int | None = None
    queue_ms: float = 0.0
    cancel: CancelToken = field(default_factory=CancelToken)
    on_device_oom: Callable[[], Awaitable[list[str]]] | None = None
    # every modality the request was admitted for (the model serves each one)
    modalities: list[Modality] = field(default_factory=list)

    def telemetry(self, engine: EngineTiming | None = None, inference_ms: float = 0.0) -> HypnosTelemetry:
        """The hypnos_telemetry object for this request's response."""
        timing = engine if engine is not None else EngineTiming()
        if timing.queue_ms is None:
            timing.queue_ms = round(self.queue_ms, 3)
        return HypnosTelemetry(
            previous_tier=self.previous_tier,
            placement=self.placement,
            tier_switch_latency_ms=round(self.tier_switch_latency_ms, 3),
            inference_latency_ms=round(inference_ms, 3),
            evicted_models=list(self.evicted_models),
            engine=timing,
            tier_switch_phases=self.tier_switch_phases,
        )

    async def run_with_oom_retry(self, call: Callable[[Engine], Awaitable[T]]) -> T:
        """Run `call(engine)`; on a device OOM (DeviceOutOfMemory, or the engine library's own error the engine
        recognizes) evict idle models and retry once, else 507 device_out_of_memory."""
        try:
            return await self._mapped(call(self.engine))
        except DeviceOutOfMemory:
            await self._evict_for_oom()
        try:
            return await self._mapped(call(self.engine))
        except DeviceOutOfMemory as error:
            raise self._again(error) from error

    async def first_with_oom_retry(
        self, start: Callable[[Engine], AsyncIterator[T]]
    ) -> tuple[AsyncIterator[T], T | None]:
        """Start a stream and wait for its first item (None: it ended empty); a device OOM before that item (nothing
        was sent yet) evicts idle models and starts the stream once more, else 507 device_out_of_memory; a first
        item that only announces the stream (ChatAccepted) extends that retry to the stream's first real item.
        Returns the stream, to read on from, and its first item."""
        for attempt in range(2):
            events = start(self.engine).__aiter__()
            try:
                first = await self._mapped(anext(events, None))
            except DeviceOutOfMemory as error:
                if attempt:
                    raise self._again(error) from error
                await self._evict_for_oom()
                continue
            if isinstance(first, ChatAccepted) and not attempt:  # an announcement: the retry covers the prefill too
                return self._retried_after_announcement(events, start), first
            return events, first
        raise AssertionError("unreachable")

    async def _retried_after_announcement(
        self, events: AsyncIterator[T], start: Callable[[Engine], AsyncIterator[T]]
    ) -> AsyncIterator[T]:
        """The rest of a stream whose first item only announced it (ChatAccepted, sent before the prefill): a device
        OOM before its first real item evicts idle models and starts it once more (its announcement dropped, the
        client has it already), else 507 device_out_of_memory."""
        try:
            try:
                first = await self._mapped(anext(events, None))
            except DeviceOutOfMemory:
                await self._evict_for_oom()
                events = start(self.engine).__aiter__()
                try:
                    first = await self._mapped(anext(events, None))
                    while isinstance(first, ChatAccepted):
                        first = await self._mapped(anext(events, None))
                except DeviceOutOfMemory as error:
                    raise self._again(error) from error
            if first is None:
                return
            yield first
            async for item in events:
                yield item
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    async def _mapped(self, work: Awaitable[T]) -> T:
        """Await `work`, turning the engine library's device OOM into DeviceOutOfMemory (an in-process engine)."""
        try:
            return await work
        except (DeviceOutOfMemory, asyncio.CancelledError):
            raise
        except Exception as error:
            if self.engine.device_oom(error):
                raise out_of_memory(self.model_id, error) from error
            raise

    async def _evict_for_oom(self) -> None:
        if self.on_device_oom is not None:
            self.evicted_models.extend(await self.on_device_oom())

    def _again(self, error: DeviceOutOfMemory) -> DeviceOutOfMemory:
        return DeviceOutOfMemory(
            f"the model `{self.model_id}` ran out of device memory again after idle models were evicted "
            f"({error.message}); retry later"
        )


class SlotGate:
    """FIFO slots of one model: `capacity` requests run together, the rest wait in arrival order."""

    __slots__ = ("_waiters", "capacity", "in_use")

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def queued(self) -> int:
        """Requests waiting for a slot."""
        return len(self._waiters)

    def try_acquire(self) -> bool:
        """Take a slot without waiting, when one is free and nobody is ahead."""
        if self.in_use < self.capacity and not self._waiters:
            self.in_use += 1
            return True
        return False

    async def acquire(self) -> None:
        """Wait for a slot in arrival order; cancellation leaves the gate consistent."""
        if self.try_acquire():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed to us as we were cancelled: pass it on
            else:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        """Hand the slot to the next waiter, or free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.in_use -= 1
