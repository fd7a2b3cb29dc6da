"""GET /v1/memory/status as msgspec Structs (section 14): the body, one model's entry, the kv_park object."""

from __future__ import annotations

from typing import Any

import msgspec

from hypnos.config import ProfileObjective
from hypnos.hardware import GpuSample
from hypnos.hosting import EngineProcessInfo
from hypnos.scheduler.records import EvictionRecord
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
    # the CPU ids the scheduler shares out between computing models (affinity mask, cut to the cgroup CPU quota)
    cpu_cores: list[int] = []


class ModelMemoryStatus(msgspec.Struct, kw_only=True):
    """One model in the status: where it is, what it costs to reload, how busy it is."""

    id: str
    enabled: bool
    modality: Modality
    modalities: list[Modality]
    engine: str  # the API's EngineKind (appendix)
    backend: str  # the concrete engine behind it (kokoro_onnx, piper, faster_whisper, diffusers, ...)
    engine_plugin: str = ""  # the plugin's own engine kind: the config's `engine`
    total_weight_bytes: int
    priority: ModelPriority
    current_tier: MemoryTier
    placement: LayerPlacementPlan
    moe_offload: MoeOffload
    expert_bytes: int
    active_leases: int
    # of those, the slots batch lines hold (/v1/batches: below every interactive request)
    batch_leases: int = 0
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
    # measured placement, at the model's last load: what its estimate booked, what its host then held (the resident
    # set's growth, or NVML's figure on a GPU), and the factor its estimate now takes (1.0: never measured)
    load_booked_bytes: int | None = None
    load_measured_bytes: int | None = None
    estimate_correction: float = 1.0
    # the CPU ids the model computes on now (its share while a request computes, empty while idle; a model pinned
    # by its config's `cores` keeps those), and the threads its engine computes with now (null: never told, or an
    # engine that cannot change them and is pinned to its share instead)
    cores: list[int] = []
    threads: int | None = None


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


class PromptCacheModel(msgspec.Struct, kw_only=True):
    """One model's saved prompt states."""

    model: str
    entries: int = 0
    ram_bytes: int = 0
    disk_bytes: int = 0


class PromptCacheStatus(msgspec.Struct, kw_only=True):
    """The prompt_cache object: saved prompt states in RAM (tier 2) and on disk (tier 3), lookups by tier."""

    ram_bytes: int = 0
    disk_bytes: int = 0
    hits: dict[str, int] = {}  # by tier: slots, ram, disk
    misses: int = 0
    models: list[PromptCacheModel] = []


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
    prompt_cache: PromptCacheStatus = msgspec.field(default_factory=PromptCacheStatus)
    gpu: GpuSample | msgspec.UnsetType = msgspec.UNSET
    profile: ProfileStatus | msgspec.UnsetType = msgspec.UNSET
    latency: Any | msgspec.UnsetType = msgspec.UNSET
