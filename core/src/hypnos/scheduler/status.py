"""GET /v1/memory/status as msgspec Structs (section 14), built from the scheduler's state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from hypnos.config import ProfileObjective, Settings
from hypnos.hardware import GpuSample
from hypnos.hosting import EngineProcessInfo, HostedEngine
from hypnos.scheduler.admission import estimated_wait_ms, profile_objective
from hypnos.scheduler.load_backoff import load_failure_reason
from hypnos.scheduler.planner import total_weight_bytes
from hypnos.scheduler.records import EvictionRecord
from hypnos.scheduler.state import ModelState
from hypnos.scheduler.tiers import TierManager
from hypnos.types import LayerPlacementPlan, MemoryTier, Modality, ModelPriority, MoeOffload


class Capabilities(msgspec.Struct, kw_only=True):
    """The machine and the budgets derived from it."""

    accelerator: str
    topology: str
    device_name: str
    total_vram_bytes: int
    usable_vram_budget_bytes: int
    pinned_ram_budget_bytes: int
    physical_memory_bytes: int
    simulated: bool
    installed_memory_bytes: int
    tier2_to_tier1_bandwidth_gbps: float
    tier3_to_tier2_bandwidth_gbps: float


class ModelMemoryStatus(msgspec.Struct, kw_only=True):
    """One model in the status: where it is, what it costs to reload, how busy it is."""

    id: str
    enabled: bool
    modality: Modality
    modalities: list[Modality]
    engine: str  # the API's EngineKind (appendix)
    backend: str  # the concrete engine behind it (kokoro_onnx, piper, faster_whisper, diffusers, ...)
    total_weight_bytes: int
    priority: ModelPriority
    current_tier: MemoryTier
    placement: LayerPlacementPlan
    moe_offload: MoeOffload
    expert_bytes: int
    active_leases: int
    idle_seconds: float
    total_requests_served: int
    requests_per_minute: float
    reload_estimate_ms: int
    service_ms: float | None
    estimated_wait_ms: int | None
    slots: int
    queued: int
    load_failures: int
    unavailable_reason: str | None = None
    # where the engine runs: "process" (an engine host of its own) or "thread" (in the server process)
    isolation: str = "thread"
    # the engine host while one runs: pid, measured RSS, restarts, start time (null while none runs, or in a thread)
    engine_process: EngineProcessInfo | None = None
    # engine hosts started again after one died on its own (crash, hang, kill), kept while no host runs
    engine_restarts: int = 0
    # what the scheduler books for the model (tier 1 + tier 2) and what its host measurably holds (RSS, + VRAM)
    booked_bytes: int = 0
    measured_bytes: int | None = None


class KvParkedModel(msgspec.Struct, kw_only=True):
    """One model's parked conversations."""

    model: str
    slots: int
    tokens: int
    bytes: int
    parked_secs_ago: float


class KvParkStatus(msgspec.Struct, kw_only=True):
    """The kv_park object (also the answer of /v1/memory/kv-park)."""

    enabled: bool
    max_bytes: int
    used_bytes: int = 0
    models: list[KvParkedModel] = []


class ProfileStatus(msgspec.Struct, kw_only=True):
    """The configured workload profile and its objective."""

    name: str
    objective: ProfileObjective | None = None


class MemoryStatus(msgspec.Struct, kw_only=True):
    """The whole GET /v1/memory/status body."""

    capabilities: Capabilities
    tier1_vram_used_bytes: int
    tier1_vram_free_bytes: int
    tier1_vram_real_free_bytes: int
    tier1_vram_real_total_bytes: int
    tier1_vram_unaccounted_bytes: int
    tier1_vram_effective_free_bytes: int
    tier2_pinned_ram_used_bytes: int
    tier2_pinned_ram_free_bytes: int
    physical_pool_free_bytes: int | None
    process_footprint_bytes: int
    process_memory_bytes: int
    process_memory_cap_bytes: int | None
    models: list[ModelMemoryStatus]
    recent_evictions: list[EvictionRecord]
    kv_park: KvParkStatus
    gpu: GpuSample | msgspec.UnsetType = msgspec.UNSET
    profile: ProfileStatus | msgspec.UnsetType = msgspec.UNSET
    latency: Any | msgspec.UnsetType = msgspec.UNSET


def model_status(state: ModelState, tiers: TierManager, now: float) -> ModelMemoryStatus:
    """The status entry of one model."""
    estimate = state.estimate()
    budgets = tiers.budgets
    idle = 0.0 if state.active_leases or not state.last_used else max(0.0, now - state.last_used)
    service = state.service_ms
    hosted = state.engine if isinstance(state.engine, HostedEngine) else None
    process = hosted.process_info() if hosted is not None else None
    hosted_reason = hosted.unavailable_reason if hosted is not None else None
    engine, backend = state.wire_engine
    return ModelMemoryStatus(
        id=state.id,
        enabled=state.enabled,
        modality=state.config.modality,
        modalities=state.modalities,
        engine=engine,
        backend=backend,
        total_weight_bytes=total_weight_bytes(estimate),
        priority=state.config.priority,
        current_tier=state.tier,
        placement=state.placement,
        moe_offload=state.moe_offload,
        expert_bytes=estimate.expert_bytes,
        active_leases=state.active_leases,
        idle_seconds=round(idle, 3),
        total_requests_served=state.total_requests_served,
        requests_per_minute=round(state.rate.per_minute(now), 3),
        reload_estimate_ms=round(state.eviction_reload_ms(budgets)),
        service_ms=None if service is None else round(service, 3),
        estimated_wait_ms=estimated_wait_ms(state, budgets),
        slots=state.gate.capacity,
        queued=state.gate.queued,
        load_failures=state.load_failures,
        unavailable_reason=state.unavailable_reason or load_failure_reason(state, now) or hosted_reason,
        isolation="process" if hosted is not None else "thread",
        engine_process=process,
        engine_restarts=hosted.policy.restarts if hosted is not None else 0,
        booked_bytes=state.booked.vram_bytes + state.booked.pinned_ram_bytes,
        measured_bytes=None if process is None else process.rss_bytes + (process.vram_bytes or 0),
    )


def build_status(
    models: Iterable[ModelState],
    tiers: TierManager,
    settings: Settings,
    now: float,
    *,
    kv_park: KvParkStatus,
    latency: Any = msgspec.UNSET,
) -> MemoryStatus:
    """The full snapshot; `latency` comes from the observability layer when it provides one."""
    budgets = tiers.budgets
    info = tiers.hardware.info()
    tier1 = tiers.tier1()
    footprint = tiers.hardware.process_memory_bytes()
    gpu = tiers.hardware.gpu_sample()
    profile: ProfileStatus | msgspec.UnsetType = msgspec.UNSET
    if settings.server.profile:
        profile = ProfileStatus(name=settings.server.profile, objective=profile_objective(settings.server.profile))
    return MemoryStatus(
        capabilities=Capabilities(
            accelerator=info.accelerator,
            topology=info.topology,
            device_name=info.device_name,
            total_vram_bytes=info.total_vram_bytes,
            usable_vram_budget_bytes=budgets.tier1_bytes,
            pinned_ram_budget_bytes=budgets.tier2_bytes,
            physical_memory_bytes=info.physical_memory_bytes,
            simulated=info.simulated,
            installed_memory_bytes=info.installed_memory_bytes,
            tier2_to_tier1_bandwidth_gbps=budgets.tier2_to_tier1_gbps,
            tier3_to_tier2_bandwidth_gbps=budgets.tier3_to_tier2_gbps,
        ),
        tier1_vram_used_bytes=tier1.used,
        tier1_vram_free_bytes=tier1.free,
        tier1_vram_real_free_bytes=tier1.real_free,
        tier1_vram_real_total_bytes=tier1.real_total,
        tier1_vram_unaccounted_bytes=tier1.unaccounted,
        tier1_vram_effective_free_bytes=tier1.effective_free,
        tier2_pinned_ram_used_bytes=tiers.used_tier2,  # parked KV states included
        tier2_pinned_ram_free_bytes=max(0, budgets.tier2_bytes - tiers.used_tier2),
        physical_pool_free_bytes=None if budgets.discrete else max(0, info.physical_memory_bytes - tiers.used_process),
        process_footprint_bytes=footprint,
        process_memory_bytes=max(footprint, tiers.used_process),
        process_memory_cap_bytes=budgets.process_cap_bytes,
        models=[model_status(state, tiers, now) for state in models],
        recent_evictions=list(reversed(tiers.recent_evictions)),
        kv_park=kv_park,
        gpu=gpu if gpu is not None else msgspec.UNSET,
        profile=profile,
        latency=latency,
    )
