"""A lease held on a node agent, as the front's routes see it: the Lease, its engine calls and its release."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from hypnos.engine import CancelToken, EngineCapabilities, method_table
from hypnos.engine_methods import forward_core_methods, forwarder
from hypnos.errors import HypnosError, clip
from hypnos.scheduler import Lease
from hypnos.types import Modality

from hypnos_server.cluster.wire import Failure, LeaseGrant

if TYPE_CHECKING:
    from hypnos_server.cluster.nodes import LeaseRouter, Node

logger = logging.getLogger(__name__)


def node_lost(model: str) -> HypnosError:
    """503 model_not_available: the node serving the request went away (other nodes take the next requests)."""
    return HypnosError(503, "model_not_available", f"The node serving `{clip(model)}` went away; retry", retry_after=1)


async def next_value(pieces: Any) -> Any:
    """The next item of a Ray streaming generator (StopAsyncIteration at its end). `anext` already waited for the
    item to arrive, so a non-blocking `ray.get` reads a small one from this process's store without a second thread
    hop; a large one still on the node is awaited."""
    import ray
    from ray.exceptions import GetTimeoutError

    ref = await pieces.__anext__()
    try:
        return ray.get(ref, timeout=0)
    except GetTimeoutError:
        return await ref


def cancel_stream(node: Node, pieces: Any) -> None:
    """Stop a node's stream (or call) the front no longer reads (the agent then stops the engine)."""
    import ray

    if node.alive:
        try:
            ray.cancel(pieces)
        except Exception:  # already over, or the node just went away
            logger.debug("cancelling a stream on %s failed", node.node_id, exc_info=True)


class RemoteCancel(CancelToken):
    """The front's cancel token of a remote lease: cancelling it also cancels the engine on the node."""

    def __init__(self, node: Node, lease_id: str) -> None:
        super().__init__()
        self._node, self._lease_id = node, lease_id

    def cancel(self) -> None:
        """Stop the local work and ask the node's engine to stop at its next check."""
        already = self.cancelled
        super().cancel()
        if not already and self._node.alive:
            self._node.agent.cancel.remote(self._lease_id)


class RemoteEngine:
    """Stands in for the leased engine on the front: every modality call goes to the node's agent through Ray. A
    stream opened together with the lease (`prepared`) is the answer of the first matching call."""

    def __init__(
        self,
        cluster: LeaseRouter,
        node: Node,
        lease_id: str,
        model: str,
        prepared: tuple[str, Any, list[Any], Any] | None,
    ) -> None:
        self._cluster, self._node, self._lease_id, self._model = cluster, node, lease_id, model
        self.prepared = prepared  # (method, argument, its first batch, the rest: the Ray stream running on the node)
        self.began_with_lease: float | None = None  # when the prepared stream began (time.perf_counter, about)

    def capabilities(self) -> EngineCapabilities:
        """The model's capabilities (voices, image edits, shorter vectors), as the front's unloaded engine of it
        reports them."""
        front = self._cluster.front
        engine = front.get(self._model).engine if front is not None else None
        return engine.capabilities() if engine is not None else EngineCapabilities()

    def device_oom(self, error: BaseException) -> bool:
        """False: the node's agent already turned its engine's device OOM into DeviceOutOfMemory, and an error raised
        here is the cluster's own (a node lost is model_not_available)."""
        return False

    def __getattr__(self, name: str) -> Any:
        """A request method an installed kind declares of its own, run on the node like the core's."""
        front = self.__dict__.get("_cluster")
        scheduler = front.front if front is not None else None
        kinds = scheduler.engine_kinds.values() if scheduler is not None else ()
        method = method_table(kinds).get(name)
        if method is None:
            raise AttributeError(name)
        return forwarder(method, RemoteEngine._call_on_node, RemoteEngine._stream_on_node).__get__(self)

    async def _call_on_node(self, method: str, argument: Any, cancel: CancelToken) -> Any:
        return await self._call(method, argument)

    def _stream_on_node(self, method: str, argument: Any, cancel: CancelToken) -> AsyncGenerator[Any, None]:
        return self._stream(method, argument)

    def drop_prepared(self) -> None:
        """Stop a stream opened with the lease that nobody asked for."""
        prepared, self.prepared = self.prepared, None
        if prepared is not None:
            cancel_stream(self._node, prepared[3])

    async def _call(self, method: str, argument: Any) -> Any:
        from ray.exceptions import RayError

        try:
            result = await self._node.agent.call.remote(self._lease_id, method, argument)
        except RayError as error:
            raise self._cluster.lost(self._node, self._model, error) from None
        if isinstance(result, Failure):
            raise result.error()
        return result

    async def _stream(self, method: str, argument: Any) -> AsyncGenerator[Any, None]:
        from ray.exceptions import RayError

        prepared = self.prepared
        batch: list[Any] = []
        if prepared is not None and prepared[0] == method and prepared[1] is argument:
            self.prepared, batch, pieces = None, prepared[2], prepared[3]
        else:
            self.drop_prepared()
            pieces = self._node.agent.stream.options(num_returns="streaming").remote(self._lease_id, method, argument)
        finished = False
        try:
            while True:
                for piece in batch:
                    if isinstance(piece, Failure):
                        raise piece.error()
                    yield piece
                try:
                    batch = await next_value(pieces)
                except StopAsyncIteration:
                    break
            finished = True
        except RayError as error:
            finished = True
            raise self._cluster.lost(self._node, self._model, error) from None
        finally:
            if not finished:  # closed early: stop the node's side too
                cancel_stream(self._node, pieces)


forward_core_methods(RemoteEngine, RemoteEngine._call_on_node, RemoteEngine._stream_on_node)


class RemoteLeaseContext:
    """`async with cluster.lease(...)`: routes, leases on the chosen node, releases there on exit. With `stream`
    (method, argument) the node starts that stream in the same remote call that grants the lease, and sends the
    grant together with the stream's first batch."""

    def __init__(
        self,
        cluster: LeaseRouter,
        model_id: str,
        modalities: tuple[Modality, ...],
        deadline_ms: int | None,
        next_model: str | None,
        stream: tuple[str, Any] | None,
    ) -> None:
        self._cluster, self._model = cluster, model_id
        self._modalities, self._deadline, self._next = modalities, deadline_ms, next_model
        self._stream = stream
        self._node: Node | None = None
        self._lease: Lease | None = None
        self._engine: RemoteEngine | None = None
        self._id = secrets.token_hex(8)

    async def __aenter__(self) -> Lease:
        from ray.exceptions import RayError

        cluster = self._cluster
        node = await cluster.choose(self._model)
        args = (self._id, self._model, list(self._modalities), self._deadline, self._next)
        pieces, first, began = None, [], None
        cluster.opening(node, self._model, 1)
        try:
            if self._stream is None:
                pieces = node.agent.open_lease.remote(*args)
                grant = await pieces
            else:
                submitted = time.perf_counter()
                pieces = node.agent.lease_stream.options(num_returns="streaming").remote(*args, *self._stream)
                opened = await next_value(pieces)  # the refusal, or (the grant, the first batch, the lease's seconds)
                if isinstance(opened, Failure):
                    grant = opened
                else:  # the engine began once the lease was open on the node (queue, load): on this clock, about
                    grant, first, opened_in = opened
                    began = submitted + opened_in
        except RayError as error:
            raise cluster.lost(node, self._model, error) from None
        except BaseException:  # given up while the node queued, loaded or prefilled: it stops and lets the lease go
            if pieces is not None:
                cancel_stream(node, pieces)
            if node.alive:
                node.agent.close_lease.remote(self._id)
            raise
        finally:
            cluster.opening(node, self._model, -1)
        if isinstance(grant, Failure):
            raise grant.error()
        cluster.note_routes(node, grant.routes)
        prepared = None if self._stream is None else (*self._stream, first, pieces)
        self._node = node
        self._engine = RemoteEngine(cluster, node, self._id, grant.model_id, prepared)
        self._engine.began_with_lease = began
        self._lease = lease = self._lease_of(node, grant, self._engine)
        return lease

    def _lease_of(self, node: Node, grant: LeaseGrant, engine: RemoteEngine) -> Lease:
        agent, lease_id = node.agent, self._id

        async def evict_for_oom() -> list[str]:
            return list(await agent.evict_for_oom.remote(lease_id))

        fields = {name: getattr(grant, name) for name in LeaseGrant.__struct_fields__ if name != "routes"}
        return Lease(
            **fields,
            engine=engine,  # type: ignore[arg-type]
            cancel=RemoteCancel(node, lease_id),
            on_device_oom=evict_for_oom,
        )

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        from ray.exceptions import RayError

        node, lease = self._node, self._lease
        if node is None or lease is None:
            return
        self._node = None
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            lease.cancel.cancel()
        if self._engine is not None:
            self._engine.drop_prepared()
        if node.alive:
            try:
                self._cluster.note_routes(node, await node.agent.close_lease.remote(self._id))
            except RayError as error:
                self._cluster.lost(node, self._model, error)
