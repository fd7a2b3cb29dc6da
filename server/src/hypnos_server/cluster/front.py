"""The front's model backend on a Ray cluster: one NodeAgent per node, each request leased where its model is best."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
from hypnos.config import ClusterConfig, Settings
from hypnos.engine import CancelToken
from hypnos.errors import HypnosError, clip
from hypnos.scheduler import Lease
from hypnos.types import MemoryTier, Modality

from hypnos_server.cluster.agent import NodeAgent
from hypnos_server.cluster.wire import Failure, LeaseGrant, NodeRoute

logger = logging.getLogger(__name__)


NAMESPACE = "hypnos"
SHUTDOWN_SECS = 30.0  # how long the nodes may take to unload their models when the front stops


def agent_name(node_id: str) -> str:
    """The Ray actor name of the agent on a node (in the `hypnos` namespace), for operators and tests."""
    return f"hypnos-agent-{node_id}"


def node_lost(model: str) -> HypnosError:
    """503 model_not_available: the node serving the request went away (other nodes take the next requests)."""
    return HypnosError(503, "model_not_available", f"The node serving `{clip(model)}` went away; retry", retry_after=1)


@dataclass
class Node:
    """One agent actor and the Ray node it is pinned to."""

    node_id: str
    address: str
    agent: Any
    alive: bool = True


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
    """Stands in for the leased engine on the front: every modality call goes to the node's agent through Ray."""

    def __init__(self, cluster: ClusterBackend, node: Node, lease_id: str, model: str) -> None:
        self._cluster, self._node, self._lease_id, self._model = cluster, node, lease_id, model

    def chat(self, request: Any, cancel: CancelToken) -> AsyncIterator[Any]:
        """Chat events, from the node's stream."""
        return self._stream("chat", request)

    def speak(self, speech: Any, cancel: CancelToken) -> AsyncIterator[Any]:
        """Speech chunks, from the node's stream."""
        return self._stream("speak", speech)

    def convert_document(self, document: Any, cancel: CancelToken) -> AsyncIterator[Any]:
        """Document events, from the node's stream."""
        return self._stream("convert_document", document)

    async def embed(self, texts: list[str], cancel: CancelToken) -> Any:
        """Embeddings computed on the node."""
        return await self._call("embed", texts)

    async def transcribe(self, audio: Any, cancel: CancelToken) -> Any:
        """A transcription made on the node."""
        return await self._call("transcribe", audio)

    async def generate_images(self, job: Any, cancel: CancelToken) -> Any:
        """Images generated on the node."""
        return await self._call("generate_images", job)

    async def extract_entities(self, job: Any, cancel: CancelToken) -> Any:
        """Entities extracted on the node."""
        return await self._call("extract_entities", job)

    async def _call(self, method: str, argument: Any) -> Any:
        from ray.exceptions import RayError

        try:
            result = await self._node.agent.call.remote(self._lease_id, method, argument)
        except RayError as error:
            raise self._cluster.lost(self._node, self._model, error) from None
        if isinstance(result, Failure):
            raise result.error()
        return result

    async def _stream(self, method: str, argument: Any) -> AsyncIterator[Any]:
        import ray
        from ray.exceptions import RayError

        pieces = self._node.agent.stream.options(num_returns="streaming").remote(self._lease_id, method, argument)
        finished = False
        try:
            async for ref in pieces:
                for piece in await ref:
                    if isinstance(piece, Failure):
                        raise piece.error()
                    yield piece
            finished = True
        except RayError as error:
            finished = True
            raise self._cluster.lost(self._node, self._model, error) from None
        finally:
            if not finished and self._node.alive:  # closed early: stop the node's side too
                try:
                    ray.cancel(pieces)
                except Exception:  # already over, or the node just went away
                    logger.debug("cancelling a stream on %s failed", self._node.node_id, exc_info=True)


class RemoteLeaseContext:
    """`async with cluster.lease(...)`: routes, leases on the chosen node, releases there on exit."""

    def __init__(
        self,
        cluster: ClusterBackend,
        model_id: str,
        modalities: tuple[Modality, ...],
        deadline_ms: int | None,
        next_model: str | None,
    ) -> None:
        self._cluster, self._model = cluster, model_id
        self._modalities, self._deadline, self._next = modalities, deadline_ms, next_model
        self._node: Node | None = None
        self._lease: Lease | None = None
        self._id = secrets.token_hex(8)

    async def __aenter__(self) -> Lease:
        from ray.exceptions import RayError

        cluster = self._cluster
        node = await cluster.choose(self._model)
        try:
            grant = await node.agent.open_lease.remote(
                self._id, self._model, list(self._modalities), self._deadline, self._next
            )
        except RayError as error:
            raise cluster.lost(node, self._model, error) from None
        if isinstance(grant, Failure):
            raise grant.error()
        self._node = node
        self._lease = lease = self._lease_of(node, grant)
        return lease

    def _lease_of(self, node: Node, grant: LeaseGrant) -> Lease:
        agent, lease_id = node.agent, self._id

        async def evict_for_oom() -> list[str]:
            return list(await agent.evict_for_oom.remote(lease_id))

        return Lease(
            **msgspec.structs.asdict(grant),
            engine=RemoteEngine(self._cluster, node, lease_id, grant.model_id),  # type: ignore[arg-type]
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
        if node.alive:
            try:
                await node.agent.close_lease.remote(self._id)
            except RayError as error:
                self._cluster.lost(node, self._model, error)


class ClusterBackend:
    """The front's model backend on Ray: places one agent per node, routes leases, gathers every node's status."""

    def __init__(self, settings: Settings, config: ClusterConfig) -> None:
        self.settings, self.config = settings, config
        self.nodes: list[Node] = []

    async def start(self) -> None:
        """Join (or start) the Ray cluster, place one agent per node (pinned to it) and stage each node's models."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not ray.is_initialized():
            address = None if self.config.address == "local" else self.config.address
            await asyncio.to_thread(ray.init, address=address, namespace=NAMESPACE, log_to_driver=False)
        alive = [n for n in ray.nodes() if n.get("Alive")]
        gpu = self.config.gpu_resource
        chosen = [n for n in alive if n["Resources"].get(gpu, 0) > 0] or alive
        actor = ray.remote(NodeAgent)
        placed = []
        for info in chosen:
            count = info["Resources"].get(gpu, 0)
            options: dict[str, Any] = {
                "scheduling_strategy": NodeAffinitySchedulingStrategy(info["NodeID"], soft=False),
                "num_cpus": 0,
                "max_restarts": 0,
                "max_concurrency": 1000,
                "name": agent_name(info["NodeID"]),
                "namespace": NAMESPACE,
            }
            if count:  # the agent holds the node's GPUs, so Ray hands them (CUDA_VISIBLE_DEVICES) to its engines
                options.update({"num_gpus": count} if gpu == "GPU" else {"resources": {gpu: count}})
            handle = actor.options(**options).remote(self.settings, self.config.stream_window_ms)
            placed.append(Node(node_id=info["NodeID"], address=info.get("NodeManagerAddress", ""), agent=handle))
        await asyncio.gather(*(node.agent.start.remote() for node in placed))
        self.nodes = placed
        logger.info("hypnos on Ray: %d node agents", len(placed))

    async def shutdown(self) -> None:
        """Unload every node's models and let the agents go."""
        import ray

        unloads = [node.agent.shutdown.remote() for node in self.alive()]
        if unloads:  # bounded: a node that does not answer is killed with the rest
            await asyncio.wait([asyncio.ensure_future(ref) for ref in unloads], timeout=SHUTDOWN_SECS)
        for node in self.nodes:
            if node.alive:
                ray.kill(node.agent)
        self.nodes = []

    def lost(self, node: Node, model: str, error: BaseException) -> HypnosError:
        """Mark a node whose agent failed as gone (its models unavailable); the error a request on it gets."""
        if node.alive:
            logger.warning("the node agent on %s went away: %s", node.node_id, error)
        node.alive = False
        return node_lost(model)

    def alive(self) -> list[Node]:
        """The nodes whose agents still answer."""
        return [node for node in self.nodes if node.alive]

    async def choose(self, model_id: str) -> Node:
        """The node to lease on: where the model is resident, else the cheapest promotion, then the shortest queue."""
        from ray.exceptions import RayError

        nodes = self.alive()
        if len(nodes) == 1:  # nothing to weigh: the lease itself answers 404/429/503/507 (saves a round trip)
            return nodes[0]
        answers = await asyncio.gather(*(n.agent.route.remote(model_id) for n in nodes), return_exceptions=True)
        ranked: list[tuple[tuple[int, int, float, int], int, Node]] = []
        failure: Failure | None = None
        for index, (node, answer) in enumerate(zip(nodes, answers, strict=True)):
            if isinstance(answer, RayError):
                self.lost(node, model_id, answer)
            elif isinstance(answer, BaseException):
                raise answer
            elif isinstance(answer, Failure):
                failure = failure or answer
            elif isinstance(answer, NodeRoute):
                ranked.append((answer.key(), index, node))
        if ranked:
            return min(ranked, key=lambda entry: entry[:2])[2]
        if failure is not None:
            raise failure.error()
        raise HypnosError(503, "model_not_available", f"No node can serve `{clip(model_id)}` now", retry_after=5)

    def lease(
        self,
        model_id: str,
        modality: Modality | Iterable[Modality],
        *,
        deadline_ms: int | None = None,
        next_model: str | None = None,
    ) -> RemoteLeaseContext:
        """The same contract as Scheduler.lease, served by the best node."""
        modalities = (modality,) if isinstance(modality, Modality) else tuple(dict.fromkeys(modality))
        return RemoteLeaseContext(self, model_id, modalities, deadline_ms, next_model)

    async def pool_change(self, action: str, model_id: str, model: Any, drain_secs: float) -> None:
        """Apply a pool change on every live node; the first node's refusal is the answer (others keep theirs)."""
        from ray.exceptions import RayError

        nodes = self.alive()
        answers = await asyncio.gather(
            *(n.agent.pool_change.remote(action, model_id, model, drain_secs) for n in nodes), return_exceptions=True
        )
        for node, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, RayError):
                self.lost(node, model_id, answer)
            elif isinstance(answer, Failure):
                logger.warning("node %s refused %s %s: %s", node.node_id, action, model_id, answer.message)
                raise answer.error()

    async def control(self, nodes: list[Node], action: str, model_id: str, value: Any, **extra: Any) -> list[Any]:
        """Run a placement control on these nodes; their answers ({placement, applies}), or the first refusal."""
        from ray.exceptions import RayError

        answers = await asyncio.gather(
            *(n.agent.control.remote(action, model_id, value, **extra) for n in nodes), return_exceptions=True
        )
        out = []
        for node, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, RayError):
                raise self.lost(node, model_id, answer)
            if isinstance(answer, BaseException):
                raise answer
            if isinstance(answer, Failure):
                raise answer.error()
            out.append(answer)
        return out

    async def move(self, model_id: str, target: MemoryTier, context_len: int | None) -> Any:
        """POST /v1/memory/tier on a cluster: up to tier 1 or 2 on the node routing would pick, down to tier 3
        everywhere; the placement (of the chosen node, or the first)."""
        nodes = self.alive() if target is MemoryTier.TIER3 else [await self.choose(model_id)]
        answers = await self.control(nodes, "move", model_id, target, context_len=context_len)
        return answers[0]["placement"] if answers else None

    async def set_enabled(self, model_id: str, enabled: bool) -> None:
        """Enable or disable on every node; a disable refused on one node (429: leased there) is undone elsewhere."""
        nodes = self.alive()
        try:
            await self.control(nodes, "set_enabled", model_id, enabled)
        except HypnosError:
            if not enabled:
                await asyncio.gather(*(n.agent.control.remote("set_enabled", model_id, True) for n in nodes))
            raise

    async def set_moe_offload(self, model_id: str, mode: Any) -> str:
        """Set the expert offload on every node: "now" when it applied now on each, else "next_load"."""
        answers = await self.control(self.alive(), "set_moe_offload", model_id, mode)
        return "now" if all(a["applies"] == "now" for a in answers) else "next_load"

    async def node_statuses(self) -> list[dict[str, Any]]:
        """Every node's /v1/memory/status body, with its node id, address and whether its agent answers."""
        from ray.exceptions import RayError

        nodes = list(self.nodes)
        answers = await asyncio.gather(*(n.agent.status.remote() for n in nodes if n.alive), return_exceptions=True)
        out: list[dict[str, Any]] = []
        replies = iter(answers)
        for node in nodes:
            entry: dict[str, Any] = {"node_id": node.node_id, "address": node.address, "alive": node.alive}
            if node.alive:
                answer = next(replies)
                if isinstance(answer, RayError):
                    self.lost(node, "", answer)
                    entry["alive"] = False
                elif isinstance(answer, dict):
                    entry.update(answer)
            out.append(entry)
        return out
