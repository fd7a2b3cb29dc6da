"""Tier budgets derived from the hardware and `[hardware]`, and the booked-vs-real accounting of section 14."""

from __future__ import annotations

from dataclasses import dataclass

from hypnos.config import HardwareConfig
from hypnos.hardware import DeviceInfo
from hypnos.types import LayerPlacementPlan

# Bandwidths (GB/s) used to estimate a reload before one was measured.
DEFAULT_GPU_BANDWIDTHS = (25.0, 6.0)
DEFAULT_SIMULATED_BANDWIDTHS = (10.0, 2.0)


@dataclass(frozen=True)
class Budgets:
    """What the planner may hand out: tier 1, tier 2 and the process cap (None: no cap)."""

    tier1_bytes: int
    tier2_bytes: int
    process_cap_bytes: int | None
    total_vram_bytes: int
    simulated: bool
    discrete: bool
    tier2_to_tier1_gbps: float
    tier3_to_tier2_gbps: float

    def process_bytes(self, plan: LayerPlacementPlan) -> int:
        """Host memory a placement holds: pinned bytes, plus its tier-1 bytes when tier 1 lives in RAM."""
        host_tier1 = plan.vram_bytes if self.simulated or not self.discrete else 0
        return plan.pinned_ram_bytes + host_tier1


def compute_budgets(config: HardwareConfig, info: DeviceInfo) -> Budgets:
    """Budgets as the advisor describes: VRAM minus the reserve, warm memory at most a fraction of RAM, the cap."""
    if config.vram_budget_bytes is not None:
        tier1 = config.vram_budget_bytes
    elif info.simulated:
        tier1 = info.total_vram_bytes
    else:
        tier1 = info.total_vram_bytes - config.vram_reserve_bytes
    if not info.simulated:
        tier1 = min(tier1, info.total_vram_bytes)
    if config.pinned_ram_budget_bytes is not None:
        tier2 = config.pinned_ram_budget_bytes
    else:
        tier2 = int(info.physical_memory_bytes * config.warm_ram_fraction)
    defaults = DEFAULT_SIMULATED_BANDWIDTHS if info.simulated else DEFAULT_GPU_BANDWIDTHS
    return Budgets(
        tier1_bytes=max(0, tier1),
        tier2_bytes=max(0, tier2),
        process_cap_bytes=config.max_process_memory_bytes,
        total_vram_bytes=info.total_vram_bytes,
        simulated=info.simulated,
        discrete=info.discrete,
        tier2_to_tier1_gbps=config.tier2_to_tier1_bandwidth_gbps or defaults[0],
        tier3_to_tier2_gbps=config.tier3_to_tier2_bandwidth_gbps or defaults[1],
    )


@dataclass(frozen=True)
class Tier1Figures:
    """Section 14's tier-1 numbers: booked, booked-free, device-real free and total, unaccounted, effective free."""

    used: int
    free: int
    real_free: int
    real_total: int
    unaccounted: int
    effective_free: int


def tier1_figures(budgets: Budgets, booked: int, device_free: int | None) -> Tier1Figures:
    """Real-free vs booked: unaccounted is device use the planner did not book, taken off what it hands out."""
    free = max(0, budgets.tier1_bytes - booked)
    if device_free is None:  # simulated: the device is exactly what was booked
        return Tier1Figures(booked, free, free, budgets.tier1_bytes, 0, free)
    real_used = max(0, budgets.total_vram_bytes - device_free)
    unaccounted = max(0, real_used - booked)
    effective = max(0, min(free - unaccounted, device_free))
    return Tier1Figures(booked, free, device_free, budgets.total_vram_bytes, unaccounted, effective)


def transfer_ms(num_bytes: int, gbps: float) -> float:
    """Milliseconds to move `num_bytes` at `gbps` gigabytes per second."""
    if gbps <= 0:
        return 0.0
    return num_bytes / (gbps * 1e9) * 1000.0
