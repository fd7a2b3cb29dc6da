"""The front's model backend on a Ray cluster: one NodeAgent per node, each request leased where its model is best."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import msgspec
from hypnos.config import ClusterConfig, Settings
from hypnos.errors import HypnosError, clip
from hypnos.scheduler import Scheduler
from hypnos.types import MemoryTier, Modality

from hypnos_server.cluster.agent import NodeAgent
from hypnos_server.cluster.lease import RemoteLeaseContext, node_lost
from hypnos_server.cluster.nodes import Node
from hypnos_server.cluster.wire import Failure, NodeRoute

logger = logging.getLogger(__name__)


NAMESPACE = "hypnos"
SHUTDOWN_SECS = 30.0  # how long the nodes may take to unload their models when the front stops


def agent_name(node_id: str) -> str:
    """The Ray actor name of the agent on a node (in the `hypnos` namespace), for operators and tests."""
    return f"hypnos-agent-{node_id}"


class ClusterBackend:
    """The front's model backend on Ray: places one agent per node (nodes that join later too), routes leases on
    each node's routing figures (cached, refreshed by every grant and release and off the request path), gathers
    every node's status. `front` is the front's own scheduler, whose pool and switches new nodes start from."""

    def __init__(self, settings: Settings, config: ClusterConfig, front: Scheduler | None = None) -> None:
        self.settings, self.config, self.front = settings, config, front
        self.nodes: list[Node] = []
        self.routes: dict[str, dict[str, NodeRoute | Failure]] = {}  # node id -> model id -> figures
        self._opening: dict[tuple[str, str], int] = {}  # leases being opened, per (node, model)
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Join (or start) the Ray cluster, place one agent per node (pinned to it) and stage each node's models;
        then watch for nodes that join."""
        import ray

        if not ray.is_initialized():
            address = None if self.config.address == "local" else self.config.address
            await asyncio.to_thread(ray.init, address=address, namespace=NAMESPACE, log_to_driver=False)
        self.nodes = await self._place(await asyncio.to_thread(ray.nodes), initial=True)
        await self.refresh(self.nodes)
        logger.info("hypnos on Ray: %d node agents", len(self.nodes))
        self._watcher = asyncio.create_task(self._watch(), name="hypnos-cluster-watch")

    async def _place(self, infos: list[dict[str, Any]], initial: bool) -> list[Node]:
        """Agents on the Ray nodes that want one and have none yet (with GPUs; every node when none has), started."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = [n for n in infos if n.get("Alive")]
        gpu = self.config.gpu_resource
        known = {node.node_id for node in self.nodes}
        chosen = [n for n in alive if n["Resources"].get(gpu, 0) > 0] or alive
        settings = self.settings if self.front is None else self._current_settings()
        actor = ray.remote(NodeAgent)
        placed = []
        for info in (n for n in chosen if n["NodeID"] not in known):
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
            handle = actor.options(**options).remote(settings, self.config.stream_window_ms)
            placed.append(Node(node_id=info["NodeID"], address=info.get("NodeManagerAddress", ""), agent=handle))
        if initial:  # the front cannot serve without them
            await asyncio.gather(*(node.agent.start.remote() for node in placed))
            return placed
        started = await asyncio.gather(*(self._join(node) for node in placed), return_exceptions=True)
        for node, outcome in zip(placed, started, strict=True):
            if outcome is not None:  # tried again on the next round
                logger.warning("the agent on the new node %s failed to start: %s", node.node_id, outcome)
                ray.kill(node.agent)
        return [node for node, outcome in zip(placed, started, strict=True) if outcome is None]

    def _current_settings(self) -> Settings:
        """The front's settings with its pool as it is now (models added, replaced or removed since startup)."""
        assert self.front is not None
        return msgspec.structs.replace(self.settings, models=[state.config for state in self.front.models()])

    async def _join(self, node: Node) -> None:
        """Start the agent of a node that joined late and bring it to the front's switches: disabled models, expert
        offload, KV parking (its pool is already the front's)."""
        await node.agent.start.remote()
        front = self.front
        if front is None:
            return
        for state in front.models():
            if state.enabled != state.config.enabled:
                await node.agent.control.remote("set_enabled", state.id, state.enabled)
            if state.moe_offload != state.config.moe_offload:
                await node.agent.control.remote("set_moe_offload", state.id, state.moe_offload)
        await node.agent.kv_park.remote(front.kv_park.enabled, front.kv_park.max_bytes)

    async def _watch(self) -> None:
        """Every watch_secs: place agents on nodes that joined, refresh the routing figures (off the request path)."""
        import ray

        while True:
            await asyncio.sleep(self.config.watch_secs)
            try:
                joined = await self._place(await asyncio.to_thread(ray.nodes), initial=False)
                if joined:
                    self.nodes = [*self.nodes, *joined]
                    logger.info("hypnos on Ray: %d node(s) joined, %d agents", len(joined), len(self.nodes))
                await self.refresh(self.alive())
            except Exception:  # a transient failure: the next round tries again
                logger.warning("watching the Ray cluster failed", exc_info=True)

    async def refresh(self, nodes: list[Node]) -> None:
        """Fetch these nodes' routing figures now."""
        from ray.exceptions import RayError

        answers = await asyncio.gather(*(n.agent.routes.remote() for n in nodes), return_exceptions=True)
        for node, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, RayError):
                self.lost(node, "", answer)
            elif isinstance(answer, dict):
                self.note_routes(node, answer)

    def note_routes(self, node: Node, routes: dict[str, NodeRoute | Failure]) -> None:
        """Keep a node's routing figures (sent with every grant and release)."""
        self.routes[node.node_id] = routes

    def opening(self, node: Node, model_id: str, step: int) -> None:
        """Count a lease being opened on a node (routing adds it to that node's queue until the grant comes)."""
        key = (node.node_id, model_id)
        count = self._opening.get(key, 0) + step
        if count > 0:
            self._opening[key] = count
        else:
            self._opening.pop(key, None)

    async def shutdown(self) -> None:
        """Stop watching, unload every node's models and let the agents go."""
        import ray

        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
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
        """The node to lease on: where the model is resident, else the cheapest promotion, then the shortest queue
        (the cached figures; asked for when a node has none for this model)."""
        from ray.exceptions import RayError

        nodes = self.alive()
        if len(nodes) == 1:  # nothing to weigh: the lease itself answers 404/429/503/507
            return nodes[0]
        answers: list[Any] = [self.routes.get(n.node_id, {}).get(model_id) for n in nodes]
        if any(answer is None for answer in answers):
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
                opening = self._opening.get((node.node_id, model_id), 0)
                ranked.append((msgspec.structs.replace(answer, queued=answer.queued + opening).key(), index, node))
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
        stream: tuple[str, Any] | None = None,
    ) -> RemoteLeaseContext:
        """The same contract as Scheduler.lease, served by the best node; `stream` (method, argument) starts that
        engine stream on the node together with the lease (the lease's engine answers it without another call)."""
        modalities = (modality,) if isinstance(modality, Modality) else tuple(dict.fromkeys(modality))
        return RemoteLeaseContext(self, model_id, modalities, deadline_ms, next_model, stream)

    async def pool_change(self, action: str, model_id: str, model: Any, drain_secs: float) -> None:
        """Apply a pool change on every live node; the first node's refusal is the answer (others keep theirs)."""
        from ray.exceptions import RayError

        nodes = self.alive()
        answers = await asyncio.gather(
            *(n.agent.pool_change.remote(action, model_id, model, drain_secs) for n in nodes), return_exceptions=True
        )
        await self.refresh([n for n in nodes if n.alive])
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
        await self.refresh([n for n in nodes if n.alive])  # a move or a switch changes where routing sends it
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
                await self.control(self.alive(), "set_enabled", model_id, True)
            raise

    async def set_moe_offload(self, model_id: str, mode: Any) -> str:
        """Set the expert offload on every node: "now" when it applied now on each, else "next_load"."""
        answers = await self.control(self.alive(), "set_moe_offload", model_id, mode)
        return "now" if all(a["applies"] == "now" for a in answers) else "next_load"

    async def kv_park(self, enabled: bool | None, max_bytes: int | None) -> dict[str, Any]:
        """Configure KV parking on every node (None: unchanged); the kv_park object over the cluster: the switch
        and cap (each node's own), bytes held summed, each parked model with the node_id that holds it."""
        from ray.exceptions import RayError

        nodes = self.alive()
        answers = await asyncio.gather(
            *(n.agent.kv_park.remote(enabled, max_bytes) for n in nodes), return_exceptions=True
        )
        store = self.front.kv_park if self.front is not None else None
        out: dict[str, Any] = {"enabled": False, "max_bytes": 0, "used_bytes": 0, "models": []}
        if store is not None:
            out.update(enabled=store.enabled, max_bytes=store.max_bytes)
        for node, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, RayError):
                self.lost(node, "", answer)
            elif isinstance(answer, BaseException):
                raise answer
            else:
                out["used_bytes"] += answer["used_bytes"]
                out["models"] += [{**model, "node_id": node.node_id} for model in answer["models"]]
        return out

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
