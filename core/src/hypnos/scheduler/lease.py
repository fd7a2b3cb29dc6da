"""A lease: the right to use one model for one request, with what it cost to get it."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypnos.engine import CancelToken, Engine
from hypnos.types import EngineTiming, HypnosTelemetry, LayerPlacementPlan, MemoryTier, TierSwitchPhases


@dataclass
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
