"""What the scheduler tracks per model, and the figures derived from it (service time, rate, reload estimate)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from hypnos.config import ModelConfig
from hypnos.engine import Engine, EngineKind, MemoryEstimate
from hypnos.hosting.supervision import CrashPolicy
from hypnos.scheduler.budgets import Budgets, transfer_ms
from hypnos.scheduler.eviction import DecayingRate
from hypnos.scheduler.lease import SlotGate
from hypnos.scheduler.load_backoff import load_backoff_policy
from hypnos.scheduler.measure_store import scaled_estimate
from hypnos.scheduler.planner import total_weight_bytes
from hypnos.types import LayerPlacementPlan, MemoryTier, Modality, MoeOffload
from hypnos.wire_kind import wire_engine

logger = logging.getLogger(__name__)

SERVICE_EWMA_ALPHA = 0.3
RELOAD_EWMA_ALPHA = 0.5


def failure_reason(model: ModelConfig, error: Exception) -> str:
    """Why building or estimating a model's engine failed, said so that the operator knows what to change: a missing
    file names its key and how to get it, instead of a raw FileNotFoundError."""
    if isinstance(error, FileNotFoundError):
        missing = str(error.filename or error)
        keys = [key for key in _PATH_KEYS if getattr(model, key) and missing.endswith(str(getattr(model, key)))]
        named = f"`{keys[0]}` = {getattr(model, keys[0])!r}" if keys else "a file of the model"
        return (
            f"{named} is missing ({missing}): put the file there (`hypnos pull <catalog id>` downloads a catalog "
            "model, `hypnos starter` writes the starter models), or fix the path in the config"
        )
    return f"{type(error).__name__}: {error}"


_PATH_KEYS = ("weights_path", "aux_path", "text_encoder_path", "tokenizer_path", "voices_path")


@dataclass
class ModelState:
    """Everything the scheduler tracks about one configured model."""

    config: ModelConfig
    engine: Engine | None
    unavailable_reason: str | None = None
    enabled: bool = True
    tier: MemoryTier = MemoryTier.TIER3
    placement: LayerPlacementPlan = field(default_factory=LayerPlacementPlan)
    booked: LayerPlacementPlan = field(default_factory=LayerPlacementPlan)
    active_leases: int = 0
    total_requests_served: int = 0
    load_failures: int = 0
    # why the last load failed, and the backoff before the next try (scheduler/load_backoff.py)
    load_error: str | None = None
    load_backoff: CrashPolicy = field(default_factory=load_backoff_policy)
    service_ms_avg: float | None = None
    last_used: float = 0.0
    interactive_at: float | None = None  # when an interactive request (not a batch line) last came or ended
    gate: SlotGate = field(default_factory=lambda: SlotGate(1))
    transition: asyncio.Task[Any] | None = None
    estimate_cache: MemoryEstimate | None = None  # the estimate the planner uses: the engine's, corrected
    raw_estimate: MemoryEstimate | None = None  # the engine's own estimate
    # measured placement (measured.py): what its host held / the estimate booked at the last load, and the factor
    # the engine's estimate takes from it (1.0: never measured)
    estimate_ratio: float = 1.0
    load_booked_bytes: int | None = None
    load_measured_bytes: int | None = None
    moe_offload: MoeOffload = MoeOffload.OFF
    context_override: int | None = None
    # cells (all slots) the engine grew the context to at tier 1; the next promotion books them (0: as configured)
    grown_context_len: int = 0
    rate: DecayingRate = field(default_factory=DecayingRate)
    reload_ms: dict[MemoryTier, float] = field(default_factory=dict)
    # reload times estimated from the size and the tier bandwidths, per source tier (the budgets never change)
    reload_estimates: dict[MemoryTier, float] = field(default_factory=dict)
    priority_rank: int = 0
    # the CPU ids the model computes on now (its share of the cores while a lease computes; empty while idle) and
    # the threads its engine reported computing with (None: never told, or it cannot change them)
    core_share: list[int] = field(default_factory=list)
    threads_now: int | None = None
    # what the model serves: its config's modalities and what its engine found in its files (set at construction)
    modalities: list[Modality] = field(default_factory=list)
    # the installed engine kind the config's `engine` names (None when no plugin provides it)
    kind: EngineKind | None = None

    def __post_init__(self) -> None:
        if self.estimate_cache is not None and self.raw_estimate is None:
            self.raw_estimate = self.estimate_cache
            self.estimate_cache = scaled_estimate(self.raw_estimate, self.estimate_ratio)
        self.modalities = self.modalities or self.config.all_modalities
        self.gate = SlotGate(self.config.slots)
        self.moe_offload = self.config.moe_offload
        self.priority_rank = self.config.priority.rank

    @property
    def id(self) -> str:
        """The model's id."""
        return self.config.id

    @property
    def wire_engine(self) -> tuple[str, str]:
        """(engine, backend) as the wire reports them: the API's EngineKind and the concrete engine."""
        kinds = {} if self.kind is None else {self.config.engine: self.kind}
        return wire_engine(self.config.engine, self.config.modality, kinds)

    @property
    def waiting(self) -> int:
        """Requests queued for a slot."""
        return self.gate.queued

    @property
    def service_ms(self) -> float | None:
        """Average time a request held the model (recent-weighted), once measured."""
        return self.service_ms_avg

    @property
    def busy(self) -> bool:
        """Leased, holding a slot, or with requests queued: never evicted or moved."""
        return self.active_leases > 0 or self.gate.in_use > 0 or self.gate.queued > 0

    def in_interactive_use(self, now: float, window_secs: float) -> bool:
        """Whether an interactive request came or ended within `window_secs` (batch work leaves the model to it)."""
        return self.interactive_at is not None and now - self.interactive_at <= window_secs

    def record_service(self, elapsed_ms: float) -> None:
        """Fold one request's holding time into the average."""
        self.total_requests_served += 1
        if self.service_ms_avg is None:
            self.service_ms_avg = elapsed_ms
        else:
            self.service_ms_avg += SERVICE_EWMA_ALPHA * (elapsed_ms - self.service_ms_avg)

    def record_reload(self, from_tier: MemoryTier, elapsed_ms: float) -> None:
        """Remember how long a load into tier 1 from `from_tier` took."""
        before = self.reload_ms.get(from_tier)
        self.reload_ms[from_tier] = elapsed_ms if before is None else before + RELOAD_EWMA_ALPHA * (elapsed_ms - before)

    def estimate(self) -> MemoryEstimate:
        """The engine's estimate, read once; an engine whose estimate fails is dropped (the model unavailable, with
        the reason), never booked as 0 bytes; an unavailable model books nothing."""
        if self.estimate_cache is None:
            if self.engine is not None:
                try:
                    self.raw_estimate = self.engine.estimate()
                    self.estimate_cache = scaled_estimate(self.raw_estimate, self.estimate_ratio)
                    return self.estimate_cache
                except Exception as error:
                    logger.warning("estimating %s failed: %s", self.id, error)
                    reason = failure_reason(self.config, error)
                    self.unavailable_reason = f"estimating the model's memory failed: {reason}"
                    self.engine = None
            return MemoryEstimate(weight_bytes=0)
        return self.estimate_cache

    def correct_estimate(self, ratio: float) -> None:
        """From now on the planner uses the engine's estimate times `ratio` (what a load measured)."""
        self.estimate_ratio = ratio
        if self.raw_estimate is not None:
            self.estimate_cache = scaled_estimate(self.raw_estimate, ratio)
        self.reload_estimates.clear()

    def reload_estimate_ms(self, budgets: Budgets, from_tier: MemoryTier) -> float:
        """Time to reach tier 1 from `from_tier`: measured when it was, else from the size and tier bandwidths."""
        if from_tier == MemoryTier.TIER1:
            return 0.0
        measured = self.reload_ms.get(from_tier)
        if measured is not None:
            return measured
        ms = self.reload_estimates.get(from_tier)
        if ms is None:
            size = total_weight_bytes(self.estimate())
            ms = transfer_ms(size, budgets.tier2_to_tier1_gbps)
            if from_tier == MemoryTier.TIER3:
                ms += transfer_ms(size, budgets.tier3_to_tier2_gbps)
            self.reload_estimates[from_tier] = ms
        return ms

    def eviction_reload_ms(self, budgets: Budgets) -> float:
        """The reload cost from where an eviction would leave the model (tier 2 from the GPU, else disk)."""
        where = MemoryTier.TIER2 if self.tier == MemoryTier.TIER1 else MemoryTier.TIER3
        return self.reload_estimate_ms(budgets, where)
