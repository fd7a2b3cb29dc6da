"""The node agent: one Ray actor per machine holding that machine's scheduler and engines, leased by the front."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

import msgspec
from hypnos.config import ModelConfig, Settings
from hypnos.engine import DeviceOutOfMemory, engine_method, method_table
from hypnos.errors import HypnosError, clip, server_error
from hypnos.plugins import collect_engine_kinds
from hypnos.scheduler import Lease, LeaseContext, Scheduler
from hypnos.types import MemoryTier, Modality

from hypnos_server.cluster.wire import Failure, LeaseGrant, NodeRoute, failure_of
from hypnos_server.plugin_loading import installed_plugin_manager
from hypnos_server.routes.inference import engine_failed_message

logger = logging.getLogger(__name__)

TIER_RANK = {MemoryTier.TIER1: 0, MemoryTier.TIER2: 1, MemoryTier.TIER3: 2}
_END = None  # ends a stream's queue (engines never yield None)


def _engine_failure(model: str, error: Exception) -> Failure:
    """A non-HypnosError from an engine: logged whole here, the client gets the spec's 500 without its text."""
    if isinstance(error, HypnosError):
        return failure_of(error)
    logger.error("the engine of %s failed", clip(model), exc_info=error)
    return failure_of(server_error(engine_failed_message(model)))


class NodeAgent:
    """Holds this node's Scheduler; the front opens, uses and closes leases on it by id (Ray carries the calls)."""

    def __init__(self, settings: Settings, stream_window_ms: float) -> None:
        manager = installed_plugin_manager()
        self.scheduler = Scheduler(settings, collect_engine_kinds(manager))
        # the request methods the front may call through a lease: the core's and the installed kinds' own
        self.methods = method_table(self.scheduler.engine_kinds.values())
        self.window_secs = max(0.0, stream_window_ms) / 1000.0
        self._leases: dict[str, tuple[LeaseContext, Lease]] = {}
        self._producers: dict[str, asyncio.Future[None]] = {}  # each lease's running stream
        self._opening: set[str] = set()  # leases waiting for admission or their model's load
        self._abandoned: set[str] = set()  # of those, the ones the front closed already

    async def start(self) -> str:
        """Stage this node's startup models; returns the Ray node id the agent runs on."""
        import ray

        await self.scheduler.stage_startup()
        return str(ray.get_runtime_context().get_node_id())

    async def shutdown(self) -> None:
        """Unload every model of this node (the front is going away)."""
        await self.scheduler.shutdown()

    def route(self, model_id: str, free_tier1: int | None = None) -> NodeRoute | Failure:
        """What routing weighs for this model here: tier, whether it fits the free tier 1, estimated wait, queue."""
        try:
            state = self.scheduler.serving(model_id)
        except HypnosError as error:
            return failure_of(error)
        free = self.scheduler.tiers.free_memory().tier1 if free_tier1 is None else free_tier1
        needed = state.estimate().weight_bytes if state.estimate_cache is not None else 0
        return NodeRoute(
            tier_rank=TIER_RANK[state.tier],
            fits=state.tier is MemoryTier.TIER1 or needed <= free,
            estimated_wait_ms=self.scheduler.estimated_wait_ms(model_id),
            queued=state.gate.in_use + state.gate.queued,
        )

    def routes(self) -> dict[str, NodeRoute | Failure]:
        """Every model's routing figures here (the front caches them and refreshes them off the request path)."""
        free = self.scheduler.tiers.free_memory().tier1
        return {state.id: self.route(state.id, free) for state in self.scheduler.models()}

    def status(self) -> dict[str, Any]:
        """This node's /v1/memory/status body."""
        return msgspec.to_builtins(self.scheduler.status())

    async def open_lease(
        self, lease_id: str, model_id: str, modalities: list[Modality], deadline_ms: int | None, next_model: str | None
    ) -> LeaseGrant | Failure:
        """Admit and lease the model here (promoting it); held until close_lease. The grant carries this node's
        fresh routing figures (a promotion may have evicted others)."""
        context = self.scheduler.lease(model_id, modalities, deadline_ms=deadline_ms, next_model=next_model)
        self._opening.add(lease_id)
        try:
            lease = await context.__aenter__()
        except HypnosError as error:
            return failure_of(error)
        finally:
            self._opening.discard(lease_id)
            abandoned = lease_id in self._abandoned
            self._abandoned.discard(lease_id)
        if abandoned:  # the front stopped waiting for it: straight back
            await context.__aexit__(None, None, None)
            return failure_of(HypnosError(499, "cancelled", "the client went away"))
        self._leases[lease_id] = (context, lease)
        fields = {name: getattr(lease, name) for name in LeaseGrant.__struct_fields__ if name != "routes"}
        return LeaseGrant(**fields, routes=self.routes())

    async def lease_stream(
        self,
        lease_id: str,
        model_id: str,
        modalities: list[Modality],
        deadline_ms: int | None,
        next_model: str | None,
        method: str,
        argument: Any,
    ) -> AsyncGenerator[Any, None]:
        """open_lease and stream in one remote call: the Failure that refused the lease, or the grant together with
        the stream's first batch and the seconds the lease took here (one message before the first piece), then the
        batches as `stream` sends them."""
        arrived = time.perf_counter()
        grant = await self.open_lease(lease_id, model_id, modalities, deadline_ms, next_model)
        if isinstance(grant, Failure):
            yield grant
            return
        opened_in = time.perf_counter() - arrived
        batches = self.stream(lease_id, method, argument)
        try:
            yield (grant, await anext(batches, []), opened_in)
            async for batch in batches:
                yield batch
        finally:
            await batches.aclose()

    async def close_lease(self, lease_id: str) -> dict[str, NodeRoute | Failure]:
        """Release a lease (idempotent; a stream still running on it is cancelled first); the fresh routing figures."""
        held = self._leases.pop(lease_id, None)
        if held is None:
            if lease_id in self._opening:
                self._abandoned.add(lease_id)
        else:
            producer = self._producers.get(lease_id)
            if producer is not None and not producer.done():
                held[1].cancel.cancel()
                await asyncio.wait({producer})
            await held[0].__aexit__(None, None, None)
        return self.routes()

    def cancel(self, lease_id: str) -> None:
        """The client went away: the engine stops at its next check."""
        held = self._leases.get(lease_id)
        if held is not None:
            held[1].cancel.cancel()

    async def evict_for_oom(self, lease_id: str) -> list[str]:
        """Evict idle models after a device OOM of this lease's model; their ids."""
        held = self._leases.get(lease_id)
        if held is None or held[1].on_device_oom is None:
            return []
        return await held[1].on_device_oom()

    async def call(self, lease_id: str, method: str, argument: Any) -> Any:
        """A whole-answer engine method (the table's: embed, rerank, ...) on a leased model; a Failure on error."""
        lease = self._lease(lease_id)
        if self._unknown(method, streams=False):
            return failure_of(server_error(f"this node has no whole-answer engine method `{clip(method)}`"))
        try:
            return await engine_method(lease.engine, method)(argument, lease.cancel)
        except DeviceOutOfMemory as error:
            return failure_of(error, oom=True)
        except Exception as error:
            return _engine_failure(lease.model_id, error)

    async def stream(self, lease_id: str, method: str, argument: Any) -> AsyncGenerator[list[Any], None]:
        """A streamed engine method (the table's: chat, speak, ...) as batches: the first piece alone (no added
        latency), then what arrives within each window; an error ends the stream as a batch holding a Failure."""
        lease = self._lease(lease_id)
        if self._unknown(method, streams=True):
            yield [failure_of(server_error(f"this node has no streamed engine method `{clip(method)}`"))]
            return
        queue: asyncio.Queue[Any] = asyncio.Queue()
        producer = asyncio.ensure_future(self._produce(lease, method, argument, queue))
        self._producers[lease_id] = producer
        try:
            first = True
            while True:
                batch = [await queue.get()]
                if not first:
                    closes = time.monotonic() + self.window_secs
                    while batch[-1] is not _END and (left := closes - time.monotonic()) > 0:
                        try:
                            batch.append(await asyncio.wait_for(queue.get(), left))
                        except TimeoutError:
                            break
                first = False
                ended = batch[-1] is _END
                if ended:
                    batch.pop()
                if batch:
                    yield batch
                if ended:
                    return
        finally:
            if not producer.done():  # the front stopped reading: stop the engine too
                lease.cancel.cancel()
                await asyncio.wait({producer})
            if self._producers.get(lease_id) is producer:
                del self._producers[lease_id]

    async def _produce(self, lease: Lease, method: str, argument: Any, queue: asyncio.Queue[Any]) -> None:
        try:
            async for piece in engine_method(lease.engine, method)(argument, lease.cancel):
                queue.put_nowait(piece)
        except DeviceOutOfMemory as error:
            queue.put_nowait(failure_of(error, oom=True))
        except Exception as error:
            queue.put_nowait(_engine_failure(lease.model_id, error))
        finally:
            queue.put_nowait(_END)

    async def pool_change(
        self, action: str, model_id: str, model: ModelConfig | None, drain_secs: float
    ) -> Failure | None:
        """Apply a pool change the front made (add, replace, remove) to this node's scheduler."""
        pool = self.scheduler.pool
        try:
            if action == "add" and model is not None:
                await pool.add(model)
            elif action == "replace" and model is not None:
                await pool.replace(model_id, model, drain_secs)
            elif action == "remove":
                await pool.remove(model_id, drain_secs)
            else:
                raise ValueError(f"unknown pool change {action}")
        except HypnosError as error:
            return failure_of(error)
        return None

    async def control(self, action: str, model_id: str, value: Any, context_len: int | None = None) -> Any:
        """Placement control on this node: move (a MemoryTier), set_enabled (a bool), set_moe_offload (a mode);
        the model's placement and, for moe, when it applies; a Failure when refused (404, 429, 507)."""
        scheduler = self.scheduler
        applies = "now"
        try:
            if action == "move":
                state = await scheduler.move(model_id, value, context_len=context_len)
            elif action == "set_enabled":
                state = await scheduler.set_enabled(model_id, value)
            elif action == "set_moe_offload":
                applies, state = await scheduler.set_moe_offload(model_id, value)
            else:
                raise ValueError(f"unknown control {action}")
        except HypnosError as error:
            return failure_of(error)
        return {"placement": state.placement, "applies": applies}

    def kv_park(self, enabled: bool | None, max_bytes: int | None) -> dict[str, Any]:
        """Configure this node's KV parking (either may be None: unchanged); its kv_park object."""
        store = self.scheduler.kv_park
        if enabled is not None or max_bytes is not None:
            store.configure(enabled=enabled, max_bytes=max_bytes)
        return msgspec.to_builtins(store.status())

    def _unknown(self, name: str, streams: bool) -> bool:
        """True unless `name` is a request method of the table here that streams as said (a plugin installed on the
        front but not on this node, say)."""
        method = self.methods.get(name)
        return method is None or method.streams != streams

    def _lease(self, lease_id: str) -> Lease:
        held = self._leases.get(lease_id)
        if held is None:
            raise HypnosError(500, "server_error", "the lease is not held on this node")
        return held[1]
