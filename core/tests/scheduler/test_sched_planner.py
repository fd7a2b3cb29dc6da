"""Table-driven tests of the placement planner (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest
from hypnos.engine import MemoryEstimate
from hypnos.errors import HypnosError
from hypnos.scheduler.planner import (
    FreeMemory,
    PlacementRequest,
    choose_context_len,
    plan_memory_need,
    plan_placement,
)
from hypnos.types import MemoryTier, MoeOffload


def dense(partial: bool = True, layers: int = 4) -> MemoryEstimate:
    """4 layers x 100 bytes + 50 non-layer bytes; KV 1 byte/token; workspace 10."""
    return MemoryEstimate(
        weight_bytes=100 * layers + 50,
        layer_bytes=[100] * layers,
        non_layer_bytes=50,
        kv_bytes_per_token=1,
        workspace_bytes=10,
        default_context_len=100,
        max_context_len=1000,
        supports_partial_offload=partial,
    )


def moe() -> MemoryEstimate:
    """Like dense() but 60 of each layer's 100 bytes are experts."""
    estimate = dense()
    estimate.expert_bytes_per_layer = [60] * 4
    return estimate


def flat() -> MemoryEstimate:
    """A model without layers (a diffusion pipeline, an ONNX graph): 500 bytes, all or nothing."""
    return MemoryEstimate(weight_bytes=500, workspace_bytes=0)


T1, T2, T3 = MemoryTier.TIER1, MemoryTier.TIER2, MemoryTier.TIER3

# (name, estimate, request overrides, free memory, expected plan fields)
CASES: list[tuple[str, MemoryEstimate, dict[str, Any], FreeMemory, dict[str, int | MemoryTier]]] = [
    (
        "whole model fits",
        dense(),
        {},
        FreeMemory(tier1=1000, tier2=0),
        {
            "primary_tier": T1,
            "gpu_layers": 4,
            "pinned_ram_layers": 0,
            "vram_weight_bytes": 450,
            "vram_kv_and_workspace_bytes": 110,
            "pinned_ram_bytes": 0,
            "allocated_context_len": 100,
        },
    ),
    (
        "context funded for every slot",
        dense(),
        {"slots": 3},
        FreeMemory(tier1=1000, tier2=0),
        {"gpu_layers": 4, "vram_kv_and_workspace_bytes": 310, "allocated_context_len": 300},
    ),
    (
        "exactly fits",
        dense(),
        {},
        FreeMemory(tier1=560, tier2=0),
        {"gpu_layers": 4, "pinned_ram_layers": 0},
    ),
    (
        "partial split keeps as many layers as fit",
        dense(),
        {},
        FreeMemory(tier1=400, tier2=1000),
        {
            "primary_tier": T1,
            "gpu_layers": 2,
            "pinned_ram_layers": 2,
            "vram_weight_bytes": 250,
            "pinned_ram_bytes": 200,
            "cpu_expert_layers": 0,
        },
    ),
    (
        "a lower min_gpu_layer_ratio allows one GPU layer",
        dense(),
        {"min_gpu_layer_ratio": 0.25},
        FreeMemory(tier1=300, tier2=1000),
        {"gpu_layers": 1, "pinned_ram_layers": 3, "pinned_ram_bytes": 300},
    ),
    (
        "moe off: experts follow their layer, so the layers split",
        moe(),
        {"moe_offload": MoeOffload.OFF},
        FreeMemory(tier1=400, tier2=1000),
        {"gpu_layers": 2, "cpu_expert_layers": 0},
    ),
    (
        "moe auto: experts of as few last layers as needed go to the CPU first",
        moe(),
        {"moe_offload": MoeOffload.AUTO},
        FreeMemory(tier1=400, tier2=1000),
        {
            "gpu_layers": 4,
            "pinned_ram_layers": 0,
            "cpu_expert_layers": 3,
            "vram_weight_bytes": 270,
            "pinned_ram_bytes": 180,
        },
    ),
    (
        "moe auto with room needs no offload",
        moe(),
        {"moe_offload": MoeOffload.AUTO},
        FreeMemory(tier1=1000, tier2=1000),
        {"gpu_layers": 4, "cpu_expert_layers": 0, "pinned_ram_bytes": 0},
    ),
    (
        "moe on: every layer's experts on the CPU",
        moe(),
        {"moe_offload": MoeOffload.ON},
        FreeMemory(tier1=1000, tier2=1000),
        {"gpu_layers": 4, "cpu_expert_layers": 4, "vram_weight_bytes": 210, "pinned_ram_bytes": 240},
    ),
    (
        "moe auto falls back to a layer split with all experts offloaded",
        moe(),
        {"moe_offload": MoeOffload.AUTO},
        FreeMemory(tier1=300, tier2=1000),
        {
            "gpu_layers": 3,
            "pinned_ram_layers": 1,
            "cpu_expert_layers": 3,
            "vram_weight_bytes": 170,
            "pinned_ram_bytes": 280,
        },
    ),
    (
        "moe auto has no effect on unified memory",
        moe(),
        {"moe_offload": MoeOffload.AUTO, "discrete": False},
        FreeMemory(tier1=400, tier2=1000),
        {"gpu_layers": 2, "cpu_expert_layers": 0},
    ),
    (
        "a dense model ignores moe auto",
        dense(),
        {"moe_offload": MoeOffload.AUTO},
        FreeMemory(tier1=400, tier2=1000),
        {"gpu_layers": 2, "cpu_expert_layers": 0},
    ),
    (
        "a flat model fits whole",
        flat(),
        {"context_len": 0},
        FreeMemory(tier1=500, tier2=0),
        {"gpu_layers": 0, "vram_weight_bytes": 500, "pinned_ram_bytes": 0},
    ),
    (
        "tier 2 holds the weights warm",
        dense(),
        {"target": T2},
        FreeMemory(tier1=0, tier2=450),
        {"primary_tier": T2, "gpu_layers": 0, "pinned_ram_layers": 4, "pinned_ram_bytes": 450, "vram_weight_bytes": 0},
    ),
    (
        "tier 3 holds nothing",
        dense(),
        {"target": T3},
        FreeMemory(tier1=0, tier2=0),
        {"primary_tier": T3, "ssd_layers": 4, "pinned_ram_bytes": 0, "vram_weight_bytes": 0},
    ),
    (
        "the cap allows a plan on a discrete GPU where only pinned bytes count",
        dense(),
        {},
        FreeMemory(tier1=1000, tier2=0, process=0, host_tier1=False),
        {"gpu_layers": 4},
    ),
]

# (name, estimate, request overrides, free memory, expected error type)
FAILURES: list[tuple[str, MemoryEstimate, dict[str, Any], FreeMemory, str]] = [
    ("below min_gpu_layer_ratio", dense(), {}, FreeMemory(tier1=300, tier2=1000), "insufficient_vram_or_ram"),
    ("no partial offload", dense(partial=False), {}, FreeMemory(tier1=500, tier2=1000), "insufficient_vram_or_ram"),
    ("split RAM too small", dense(), {}, FreeMemory(tier1=400, tier2=100), "insufficient_vram_or_ram"),
    ("flat model too big", flat(), {"context_len": 0}, FreeMemory(tier1=499, tier2=10_000), "insufficient_vram_or_ram"),
    ("tier 2 too small", dense(), {"target": T2}, FreeMemory(tier1=0, tier2=449), "insufficient_vram_or_ram"),
    (
        "simulated tier 1 counts against the cap",
        dense(),
        {},
        FreeMemory(tier1=1000, tier2=1000, process=500, host_tier1=True),
        "process_memory_cap",
    ),
    ("tier 2 over cap", dense(), {"target": T2}, FreeMemory(tier1=0, tier2=1000, process=100), "process_memory_cap"),
]


def _request(estimate: MemoryEstimate, overrides: dict[str, Any]) -> PlacementRequest:
    fields: dict[str, Any] = {"model_id": "m", "estimate": estimate, "target": T1, "context_len": 100}
    fields.update(overrides)
    return PlacementRequest(**fields)


@pytest.mark.parametrize(("name", "estimate", "overrides", "free", "expected"), CASES, ids=[c[0] for c in CASES])
def test_plan(name: str, estimate: MemoryEstimate, overrides: dict, free: FreeMemory, expected: dict) -> None:
    plan = plan_placement(_request(estimate, overrides), free)
    for field, value in expected.items():
        assert getattr(plan, field) == value, f"{name}: {field}"
    assert plan.vram_bytes <= free.tier1
    assert plan.pinned_ram_bytes <= free.tier2
    assert plan_memory_need(plan, free) == (0, 0, 0)
    if plan.primary_tier == T1 and estimate.num_layers:
        assert plan.gpu_layers + plan.pinned_ram_layers == estimate.num_layers
        assert plan.vram_weight_bytes + plan.pinned_ram_bytes == estimate.weight_bytes


@pytest.mark.parametrize(("name", "estimate", "overrides", "free", "kind"), FAILURES, ids=[f[0] for f in FAILURES])
def test_plan_refused(name: str, estimate: MemoryEstimate, overrides: dict, free: FreeMemory, kind: str) -> None:
    with pytest.raises(HypnosError) as caught:
        plan_placement(_request(estimate, overrides), free)
    assert caught.value.status == 507
    assert caught.value.type == kind


@pytest.mark.parametrize(
    ("configured", "requested", "expected"),
    [(None, None, 100), (200, None, 200), (200, 300, 300), (5000, None, 1000), (None, 4000, 1000)],
)
def test_context_len(configured: int | None, requested: int | None, expected: int) -> None:
    assert choose_context_len(dense(), configured, requested) == expected


def test_memory_need_names_the_shortfall() -> None:
    plan = plan_placement(_request(dense(), {}), FreeMemory(tier1=1000, tier2=0))
    assert plan_memory_need(plan, FreeMemory(tier1=500, tier2=0, process=100, host_tier1=True)) == (60, 0, 460)
