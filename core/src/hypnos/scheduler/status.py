"""GET /v1/memory/status built from the scheduler's state (the Structs are in status_types)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from hypnos.config import Settings
from hypnos.hosting import HostedEngine
from hypnos.scheduler.admission import estimated_wait_ms, profile_objective
from hypnos.scheduler.books import TierBooks
from hypnos.scheduler.load_backoff import load_failure_reason
from hypnos.scheduler.model_state import ModelState
from hypnos.scheduler.planner import total_weight_bytes
from hypnos.scheduler.status_types import (
    Capabilities,
    KvParkStatus,
    MemoryStatus,
    ModelMemoryStatus,
    ProfileStatus,
    PromptCacheStatus,
)


def model_status(state: ModelState, tiers: TierBooks, now: float) -> ModelMemoryStatus:
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
        engine_plugin=state.config.engine,
        total_weight_bytes=total_weight_bytes(estimate),
        priority=state.config.priority,
        current_tier=state.tier,
        placement=state.placement,
        moe_offload=state.moe_offload,
        expert_bytes=estimate.expert_bytes,
        active_leases=state.active_leases,
        batch_leases=state.gate.lent,
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
        load_booked_bytes=state.load_booked_bytes,
        load_measured_bytes=state.load_measured_bytes,
        estimate_correction=round(state.estimate_ratio, 4),
        cores=list(state.core_share),
        threads=state.threads_now,
    )


def build_status(
    models: Iterable[ModelState],
    tiers: TierBooks,
    settings: Settings,
    now: float,
    *,
    kv_park: KvParkStatus,
    prompt_cache: PromptCacheStatus | None = None,
    cpu_cores: list[int] | None = None,
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
            cpu_cores=list(cpu_cores or []),
        ),
        tier1_vram_used_bytes=tier1.used,
        tier1_vram_free_bytes=tier1.free,
        tier1_vram_real_free_bytes=tier1.real_free,
        tier1_vram_real_total_bytes=tier1.real_total,
        tier1_vram_unaccounted_bytes=tier1.unaccounted,
        tier1_vram_effective_free_bytes=tier1.effective_free,
        tier2_pinned_ram_used_bytes=tiers.used_tier2,  # parked KV states and the prompt cache's RAM tier included
        tier2_pinned_ram_free_bytes=max(0, budgets.tier2_bytes - tiers.used_tier2),
        physical_pool_free_bytes=None if budgets.discrete else max(0, info.physical_memory_bytes - tiers.used_process),
        process_footprint_bytes=footprint,
        process_memory_bytes=max(footprint, tiers.used_process),
        process_memory_cap_bytes=budgets.process_cap_bytes,
        models=[model_status(state, tiers, now) for state in models],
        recent_evictions=list(reversed(tiers.recent_evictions)),
        kv_park=kv_park,
        prompt_cache=prompt_cache if prompt_cache is not None else PromptCacheStatus(),
        gpu=gpu if gpu is not None else msgspec.UNSET,
        profile=profile,
        latency=latency,
    )
