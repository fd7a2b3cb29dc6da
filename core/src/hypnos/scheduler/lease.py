"""A lease: the right to use one model for one request, with what it cost to get it; and the per-model slot gate."""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncGenerator, Awaitable, Callable
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
    # below 0: work that yields its slot to interactive requests (a batch line); `yielded` once it was asked to
    priority: int = 0
    yielded: bool = False

    def give_back(self) -> None:
        """Yield the slot to a higher-priority request: the engine stops at its next token, chunk or page."""
        self.yielded = True
        self.cancel.cancel()

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
        self, start: Callable[[Engine], AsyncGenerator[T, None]]
    ) -> tuple[AsyncGenerator[T, None], T | None]:
        """Start a stream and wait for its first item (None: it ended empty); a device OOM before that item (nothing
        was sent yet) evicts idle models and starts the stream once more, else 507 device_out_of_memory; a first
        item that only announces the stream (ChatAccepted) extends that retry to the stream's first real item.
        Returns the stream, to read on from, and its first item."""
        for attempt in range(2):
            events = start(self.engine)
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
        self, events: AsyncGenerator[T, None], start: Callable[[Engine], AsyncGenerator[T, None]]
    ) -> AsyncGenerator[T, None]:
        """The rest of a stream whose first item only announced it (ChatAccepted, sent before the prefill): a device
        OOM before its first real item evicts idle models and starts it once more (its announcement dropped, the
        client has it already), else 507 device_out_of_memory."""
        try:
            try:
                first = await self._mapped(anext(events, None))
            except DeviceOutOfMemory:
                await self._evict_for_oom()
                events = start(self.engine)
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


def _always() -> bool:
    return True


class SlotGate:
    """Slots of one model: `capacity` requests run together, the rest wait, higher priority first and in arrival
    order within a priority. Work below the interactive priority (0: a batch line) never holds the last `reserve`
    slots while `reserving()` says interactive requests use the model (a one-slot model still lends its slot), and a
    holder of it that registered a yield is asked to give its slot back when a request of a higher priority has to
    wait."""

    __slots__ = ("_seq", "_waiters", "_yielders", "capacity", "in_use", "lent", "reserve", "reserving")

    def __init__(self, capacity: int, reserve: int = 0) -> None:
        self.capacity = max(1, capacity)
        self.in_use = 0
        self.lent = 0  # slots held below priority 0
        self.reserve = reserve  # slots low-priority work leaves to interactive requests while `reserving()`
        self.reserving: Callable[[], bool] = _always
        self._seq = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # (-priority, arrival, waiter), sorted
        self._yielders: list[tuple[int, Callable[[], None]]] = []  # (priority, yield) of low-priority holders

    @property
    def queued(self) -> int:
        """Requests waiting for a slot."""
        return len(self._waiters)

    def queued_from(self, priority: int) -> int:
        """Requests waiting for a slot at `priority` or above (what a request of that priority queues behind)."""
        return sum(1 for rank, _, _ in self._waiters if -rank >= priority)

    @property
    def yieldable(self) -> int:
        """Slots held by low-priority work that gives them back when asked."""
        return len(self._yielders)

    @property
    def lendable(self) -> int:
        """The slots work below priority 0 may hold together now: all of them, less the reserve while it holds."""
        if not self.reserve or not self.reserving():
            return self.capacity
        return self.capacity - min(self.reserve, self.capacity - 1)

    def _free_to(self, priority: int) -> bool:
        return self.in_use < self.capacity and (priority >= 0 or self.lent < self.lendable)

    def _take(self, priority: int) -> None:
        self.in_use += 1
        self.lent += priority < 0

    def try_acquire(self, priority: int = 0) -> bool:
        """Take a slot without waiting, when one is free to this priority and nobody of it or above is ahead."""
        if self._free_to(priority) and not self.queued_from(priority):
            self._take(priority)
            return True
        return False

    async def acquire(self, priority: int = 0) -> None:
        """Wait for a slot (higher priority first, then arrival order); a low-priority holder below `priority` is
        asked to yield; cancellation leaves the gate consistent."""
        if self.try_acquire(priority):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seq += 1
        entry = (-priority, self._seq, waiter)
        bisect.insort(self._waiters, entry, key=lambda item: item[:2])
        self._ask_to_yield(priority)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(priority)  # the slot was handed to us as we were cancelled: pass it on
            else:
                try:
                    self._waiters.remove(entry)
                except ValueError:
                    pass
            raise

    def hold_yielding(self, priority: int, give_back: Callable[[], None]) -> Callable[[], None]:
        """Register a held slot's `give_back` (called at most once, when a higher-priority request waits); returns
        the unregistering call for the slot's release."""
        entry = (priority, give_back)
        self._yielders.append(entry)
        if any(-rank > priority for rank, _, _ in self._waiters):  # someone above already waits
            self._ask_to_yield(-self._waiters[0][0])

        def unregister() -> None:
            if entry in self._yielders:
                self._yielders.remove(entry)

        return unregister

    def _ask_to_yield(self, priority: int) -> None:
        below = [entry for entry in self._yielders if entry[0] < priority]
        if below:
            entry = min(below, key=lambda item: item[0])
            self._yielders.remove(entry)
            entry[1]()

    def release(self, priority: int = 0) -> None:
        """Free a slot taken at `priority`: the next waiter takes it when its priority may (a batch line never takes
        a reserved one)."""
        self.in_use -= 1
        self.lent -= priority < 0
        while self._waiters:
            rank, _, waiter = self._waiters[0]
            if waiter.done():
                self._waiters.pop(0)
                continue
            if not self._free_to(-rank):
                return
            self._waiters.pop(0)
            self._take(-rank)
            waiter.set_result(None)
