"""Budgets from the hardware and the booked-vs-real accounting of section 14."""

from __future__ import annotations

from hypnos.config import GiB, HardwareConfig, MiB
from hypnos.hardware import DeviceInfo
from hypnos.scheduler.budgets import compute_budgets, tier1_figures, transfer_ms
from hypnos.types import LayerPlacementPlan


def device(simulated: bool, vram: int = 24 * GiB, ram: int = 64 * GiB, topology: str | None = None) -> DeviceInfo:
    return DeviceInfo(
        accelerator="Cpu" if simulated else "NvidiaCuda",
        topology=topology or ("Simulated" if simulated else "DiscretePcie"),
        device_name="d",
        total_vram_bytes=vram,
        simulated=simulated,
        installed_memory_bytes=ram,
        physical_memory_bytes=ram,
    )


def test_gpu_budget_is_vram_minus_reserve_and_half_the_ram() -> None:
    budgets = compute_budgets(HardwareConfig(), device(False))
    assert budgets.tier1_bytes == 24 * GiB - 512 * MiB
    assert budgets.tier2_bytes == 32 * GiB
    assert budgets.process_cap_bytes is None
    assert budgets.discrete and not budgets.simulated
    assert (budgets.tier2_to_tier1_gbps, budgets.tier3_to_tier2_gbps) == (25.0, 6.0)


def test_simulated_budget_is_the_simulated_vram() -> None:
    config = HardwareConfig(warm_ram_fraction=0.25, max_process_memory_bytes=10 * GiB, tier2_to_tier1_bandwidth_gbps=3)
    budgets = compute_budgets(config, device(True, vram=8 * GiB))
    assert budgets.tier1_bytes == 8 * GiB
    assert budgets.tier2_bytes == 16 * GiB
    assert budgets.process_cap_bytes == 10 * GiB
    assert budgets.tier2_to_tier1_gbps == 3
    plan = LayerPlacementPlan(vram_weight_bytes=100, vram_kv_and_workspace_bytes=10, pinned_ram_bytes=5)
    assert budgets.process_bytes(plan) == 115  # tier 1 lives in RAM when simulated


def test_explicit_budgets_win() -> None:
    config = HardwareConfig(vram_budget_bytes=10 * GiB, pinned_ram_budget_bytes=3 * GiB)
    budgets = compute_budgets(config, device(False))
    assert (budgets.tier1_bytes, budgets.tier2_bytes) == (10 * GiB, 3 * GiB)
    plan = LayerPlacementPlan(vram_weight_bytes=100, pinned_ram_bytes=5)
    assert budgets.process_bytes(plan) == 5  # VRAM is not process memory on a discrete GPU


def test_section_14_example_figures() -> None:
    budgets = compute_budgets(HardwareConfig(vram_budget_bytes=25648562176), device(False, vram=25648562176))
    figures = tier1_figures(budgets, booked=22145000000, device_free=1240000000)
    assert figures.used == 22145000000
    assert figures.free == 3503562176
    assert figures.real_free == 1240000000
    assert figures.real_total == 25648562176
    assert figures.unaccounted == 2263562176
    assert figures.effective_free == 1240000000


def test_simulated_real_free_is_budget_minus_booked() -> None:
    budgets = compute_budgets(HardwareConfig(), device(True, vram=8 * GiB))
    figures = tier1_figures(budgets, booked=3 * GiB, device_free=None)
    assert figures.real_free == figures.free == figures.effective_free == 5 * GiB
    assert figures.unaccounted == 0


def test_transfer_ms() -> None:
    assert transfer_ms(10**9, 10.0) == 100.0
    assert transfer_ms(10**9, 0.0) == 0.0
