"""What the front and the node agents hand each other through Ray: a granted lease, routing figures, failures."""

from __future__ import annotations

import msgspec
from hypnos.engine import DeviceOutOfMemory
from hypnos.errors import HypnosError
from hypnos.types import LayerPlacementPlan, MemoryTier, Modality, TierSwitchPhases


class Failure(msgspec.Struct, kw_only=True):
    """A HypnosError carried as data (Ray would wrap a raised one), turned back into the same error on the front."""

    status: int
    type: str
    message: str
    retry_after: int | None = None
    oom: bool = False

    def error(self) -> HypnosError:
        """The HypnosError this stands for (a DeviceOutOfMemory when the engine ran out of device memory)."""
        if self.oom:
            return DeviceOutOfMemory(self.message)
        return HypnosError(self.status, self.type, self.message, retry_after=self.retry_after)


def failure_of(error: HypnosError, oom: bool = False) -> Failure:
    """The Failure standing for a HypnosError."""
    return Failure(status=error.status, type=error.type, message=error.message, retry_after=error.retry_after, oom=oom)


class NodeRoute(msgspec.Struct, kw_only=True):
    """A node's figures for one model, ordered as routing prefers them: resident first (tier 1, then tier 2), then
    room for it without evictions, then the node's own estimated wait (load time included), then the queue."""

    tier_rank: int
    fits: bool
    estimated_wait_ms: int | None
    queued: int

    def key(self) -> tuple[int, int, float, int]:
        """The sort key (smaller is better); an unknown wait sorts after every known one."""
        wait = float("inf") if self.estimated_wait_ms is None else float(self.estimated_wait_ms)
        return (self.tier_rank, 0 if self.fits else 1, wait, self.queued)


class LeaseGrant(msgspec.Struct, kw_only=True):
    """A lease held on a node: what the front's Lease and the response's telemetry need."""

    model_id: str
    modalities: list[Modality]
    previous_tier: MemoryTier
    placement: LayerPlacementPlan
    tier_switch_latency_ms: float = 0.0
    evicted_models: list[str] = []
    tier_switch_phases: TierSwitchPhases | None = None
    estimated_wait_ms: int | None = None
    queue_ms: float = 0.0
    routes: dict[str, NodeRoute | Failure] = {}  # the node's routing figures right after the grant (not the Lease's)
