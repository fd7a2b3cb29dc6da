"""A node agent as the front knows it, and what a lease on a node asks of the front's backend (front.py's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hypnos.errors import HypnosError

from hypnos_server.cluster.wire import Failure, NodeRoute

if TYPE_CHECKING:
    from hypnos.scheduler import Scheduler


@dataclass
class Node:
    """One agent actor and the Ray node it is pinned to."""

    node_id: str
    address: str
    agent: Any
    alive: bool = True


class LeaseRouter(Protocol):
    """The front's backend (front.ClusterBackend) as a remote lease uses it: routing, bookkeeping, lost nodes."""

    @property
    def front(self) -> Scheduler | None:
        """The front's own scheduler (its unloaded engines answer capabilities), None without one."""
        ...

    async def choose(self, model_id: str) -> Node:
        """The node to lease on."""
        ...

    def opening(self, node: Node, model_id: str, step: int) -> None:
        """Count a lease being opened on a node."""
        ...

    def note_routes(self, node: Node, routes: dict[str, NodeRoute | Failure]) -> None:
        """Keep a node's routing figures (sent with every grant and release)."""
        ...

    def lost(self, node: Node, model: str, error: BaseException) -> HypnosError:
        """Mark a node whose agent failed as gone; the error a request on it gets."""
        ...
