"""The placement planner: pure functions from a MemoryEstimate and free memory to a LayerPlacementPlan.

Order of preference for tier 1: the whole model on the GPU; with moe_offload "on" every layer's experts on the CPU;
with "auto" the experts of as few last layers as needed (discrete GPUs only); then a layer split keeping at least
min_gpu_layer_ratio of the layers on the GPU. Nothing fitting is a 507 (insufficient_vram_or_ram or process_memory_cap).
projector_bytes (a vision or audio projector file) is counted on top of weight_bytes and always sits on the GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypnos.engine import MemoryEstimate
from hypnos.errors import HypnosError
from hypnos.types import LayerPlacementPlan, MemoryTier, MoeOffload


@dataclass(frozen=True)
class PlacementRequest:
    """What to place: the estimate, the target tier, the per-slot context, slots and grown context, the MoE mode."""

    model_id: str
    estimate: MemoryEstimate
    target: MemoryTier
    context_len: int = 0
    slots: int = 1
    grown_context_len: int = 0  # cells (all slots) an engine grew to: funded when above context_len x slots
    moe_offload: MoeOffload = MoeOffload.OFF
    min_gpu_layer_ratio: float = 0.5
    discrete: bool = True


@dataclass(frozen=True)
class FreeMemory:
    """Bytes a plan may use: tier 1, tier 2, the process cap's headroom (None: no cap); host_tier1: tier 1 is RAM."""

    tier1: int
    tier2: int
    process: int | None = None
    host_tier1: bool = False

    def process_bytes(self, plan: LayerPlacementPlan) -> int:
        """Host memory the plan would hold."""
        return plan.pinned_ram_bytes + (plan.vram_bytes if self.host_tier1 else 0)


def insufficient(message: str) -> HypnosError:
    """507 insufficient_vram_or_ram."""
    return HypnosError(507, "insufficient_vram_or_ram", message)


def process_cap(message: str) -> HypnosError:
    """507 process_memory_cap."""
    return HypnosError(507, "process_memory_cap", message)


def choose_context_len(estimate: MemoryEstimate, configured: int | None, requested: int | None = None) -> int:
    """The per-slot context: requested, else configured, else the model's default, clamped to its maximum."""
    context = requested or configured or estimate.default_context_len or estimate.max_context_len or 0
    if estimate.max_context_len:
        context = min(context, estimate.max_context_len)
    return max(0, context)


def total_weight_bytes(estimate: MemoryEstimate) -> int:
    """All weight bytes including a projector."""
    return estimate.weight_bytes + estimate.projector_bytes


def _fixed_gpu_bytes(estimate: MemoryEstimate) -> int:
    """Bytes outside the repeating layers that always sit with the GPU part (embeddings, output, projector)."""
    return max(0, estimate.weight_bytes - sum(estimate.layer_bytes)) + estimate.projector_bytes


class _Layers:
    """Prefix sums over layer and expert bytes, so each candidate split costs O(1)."""

    def __init__(self, estimate: MemoryEstimate) -> None:
        self.n = estimate.num_layers
        experts = list(estimate.expert_bytes_per_layer[: self.n])
        experts += [0] * (self.n - len(experts))
        self.layer_prefix = [0]
        self.expert_prefix = [0]
        for layer, expert in zip(estimate.layer_bytes, experts, strict=True):
            self.layer_prefix.append(self.layer_prefix[-1] + layer)
            self.expert_prefix.append(self.expert_prefix[-1] + min(expert, layer))
        self.fixed = _fixed_gpu_bytes(estimate)

    def split(self, gpu_layers: int, cpu_expert_layers: int) -> tuple[int, int]:
        """(GPU weight bytes, host bytes) with the first gpu_layers on the GPU and the last k layers' experts on CPU."""
        first_cpu_expert = max(0, self.n - cpu_expert_layers)
        moved = self.expert_prefix[gpu_layers] - self.expert_prefix[min(first_cpu_expert, gpu_layers)]
        gpu = self.fixed + self.layer_prefix[gpu_layers] - moved
        host = self.layer_prefix[self.n] - self.layer_prefix[gpu_layers] + moved
        return gpu, host


def _tier1_plan(req: PlacementRequest, layers: _Layers, gpu_layers: int, cpu_expert_layers: int) -> LayerPlacementPlan:
    est = req.estimate
    allocated = max(req.context_len * max(1, req.slots), req.grown_context_len)
    gpu, host = layers.split(gpu_layers, cpu_expert_layers)
    if layers.n == 0:
        gpu, host = total_weight_bytes(est), 0
    return LayerPlacementPlan(
        primary_tier=MemoryTier.TIER1,
        gpu_layers=gpu_layers,
        pinned_ram_layers=layers.n - gpu_layers,
        ssd_layers=0,
        vram_weight_bytes=gpu,
        vram_kv_and_workspace_bytes=est.kv_bytes_per_token * allocated + est.workspace_bytes,
        pinned_ram_bytes=host,
        allocated_context_len=allocated,
        cpu_expert_layers=min(cpu_expert_layers, gpu_layers) if cpu_expert_layers else 0,
    )


def _fits(plan: LayerPlacementPlan, free: FreeMemory, *, with_cap: bool = True) -> bool:
    if plan.vram_bytes > free.tier1 or plan.pinned_ram_bytes > free.tier2:
        return False
    return not (with_cap and free.process is not None and free.process_bytes(plan) > free.process)


def _tier1_candidates(req: PlacementRequest, layers: _Layers) -> list[LayerPlacementPlan]:
    """Every tier-1 plan in order of preference (best first), bounded by O(layers)."""
    n = layers.n
    moe = req.discrete and n > 0 and layers.expert_prefix[n] > 0 and req.moe_offload != MoeOffload.OFF
    whole_experts = n if moe and req.moe_offload == MoeOffload.ON else 0
    plans = [_tier1_plan(req, layers, n, whole_experts)]
    if moe and req.moe_offload == MoeOffload.AUTO:
        plans += [_tier1_plan(req, layers, n, k) for k in range(1, n + 1)]
    if n > 0 and req.estimate.supports_partial_offload:
        floor = max(1, math.ceil(req.min_gpu_layer_ratio * n))
        split_experts = n if moe else 0
        plans += [_tier1_plan(req, layers, g, split_experts) for g in range(n - 1, floor - 1, -1)]
    return plans


def plan_placement(req: PlacementRequest, free: FreeMemory) -> LayerPlacementPlan:
    """The best plan for req.target that fits `free`, or a 507 naming what is short."""
    est = req.estimate
    layers = _Layers(est)
    if req.target == MemoryTier.TIER3:
        return LayerPlacementPlan(primary_tier=MemoryTier.TIER3, ssd_layers=layers.n)
    if req.target == MemoryTier.TIER2:
        candidates = [
            LayerPlacementPlan(
                primary_tier=MemoryTier.TIER2, pinned_ram_layers=layers.n, pinned_ram_bytes=total_weight_bytes(est)
            )
        ]
    else:
        candidates = _tier1_candidates(req, layers)
    for plan in candidates:
        if _fits(plan, free):
            return plan
    best = candidates[0]
    if any(_fits(plan, free, with_cap=False) for plan in candidates):
        raise process_cap(
            f"placing the model `{req.model_id}` would exceed hardware.max_process_memory_bytes "
            f"({free.process_bytes(best)} bytes needed, {free.process} left under the cap)"
        )
    if req.target == MemoryTier.TIER2:
        raise insufficient(
            f"the model `{req.model_id}` needs {best.pinned_ram_bytes} bytes of warm RAM, {free.tier2} are available"
        )
    smallest = candidates[-1]
    raise insufficient(
        f"the model `{req.model_id}` does not fit next to the models in use: it needs {best.vram_bytes} bytes of "
        f"VRAM whole (at least {smallest.vram_bytes} with {smallest.gpu_layers} GPU layers and "
        f"{smallest.pinned_ram_bytes} bytes of RAM), {free.tier1} bytes of VRAM and {free.tier2} of RAM are available"
    )


def plan_memory_need(plan: LayerPlacementPlan, free: FreeMemory) -> tuple[int, int, int]:
    """How many bytes (tier 1, tier 2, process) must be freed before `plan` fits `free` (0 when none)."""
    need_process = 0
    if free.process is not None:
        need_process = max(0, free.process_bytes(plan) - free.process)
    return max(0, plan.vram_bytes - free.tier1), max(0, plan.pinned_ram_bytes - free.tier2), need_process
