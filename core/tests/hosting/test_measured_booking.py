"""Measured placement: after a load the booking follows what the engine host holds (its resident set's growth here,
NVML's figure on a GPU), the planner places the next model on that figure, and the corrected estimate is kept beside
the config file for the next start."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest
from host_kit import hosted_model, hosted_scheduler
from hypnos.config import MiB
from hypnos.hardware import StaticHardware
from hypnos.hosting import proxy
from hypnos.scheduler import Scheduler
from hypnos.testing import fake_engine_kind
from hypnos.types import MemoryTier
from sched_kit import make_settings

T1 = MemoryTier.TIER1


def model(model_id: str, estimate_mib: int, holds_mib: int) -> dict:
    """A fake model whose estimate says `estimate_mib` while its host really holds `holds_mib` at tier 1."""
    return hosted_model(model_id, layers=1, layer_mib=estimate_mib, context_len=16, hold_bytes=holds_mib * MiB)


def entry(scheduler: Scheduler, model_id: str):  # type: ignore[no-untyped-def]
    return next(m for m in scheduler.status().models if m.id == model_id)


async def test_an_estimate_30_percent_low_is_booked_as_measured_and_the_next_model_evicts_it() -> None:
    # by the estimates a (100 MiB) and b (100 MiB) share the 220 MiB tier 1; a really holds 130 MiB: b does not fit
    scheduler = hosted_scheduler([model("a", 100, 130), model("b", 100, 100)], vram_mib=220)
    try:
        await scheduler.move("a", T1)
        a = entry(scheduler, "a")
        assert a.load_booked_bytes is not None and abs(a.load_booked_bytes - 100 * MiB) < 2 * MiB
        assert a.load_measured_bytes is not None and a.load_measured_bytes >= 130 * MiB
        assert abs(a.booked_bytes - a.load_measured_bytes) <= 0.05 * a.load_measured_bytes
        assert 1.25 <= a.estimate_correction <= 1.4
        await scheduler.move("b", T1)
        assert scheduler.get("a").tier != T1 and [e.model for e in scheduler.recent_evictions] == ["a"]
        assert scheduler.get("b").tier == T1
    finally:
        await scheduler.shutdown()


async def test_an_estimate_30_percent_high_is_booked_down_and_the_next_model_fits_beside_it() -> None:
    # by the estimates a (130 MiB) and b (100 MiB) do not share the 215 MiB tier 1; a really holds 100 MiB: they do
    scheduler = hosted_scheduler([model("a", 130, 100), model("b", 100, 100)], vram_mib=215)
    try:
        await scheduler.move("a", T1)
        a = entry(scheduler, "a")
        assert a.load_measured_bytes is not None and a.booked_bytes < 115 * MiB
        assert abs(a.booked_bytes - a.load_measured_bytes) <= 0.05 * a.load_measured_bytes
        await scheduler.move("b", T1)
        assert scheduler.get("a").tier == T1 and scheduler.get("b").tier == T1
        assert scheduler.recent_evictions == []
    finally:
        await scheduler.shutdown()


async def test_the_corrected_estimate_is_kept_beside_the_config_and_planned_with_after_a_restart(
    tmp_path: Path,
) -> None:
    config = tmp_path / "hypnos.toml"
    settings = make_settings([model("a", 100, 130)], server={"isolation": "process", "shutdown_grace_secs": 5.0})
    settings = msgspec.structs.replace(settings, source=str(config))

    def start() -> Scheduler:
        return Scheduler(settings, {"fake": fake_engine_kind()}, hardware=StaticHardware(vram_bytes=400 * MiB))

    first = start()
    try:
        await first.move("a", T1)
    finally:
        await first.shutdown()
    kept = json.loads((tmp_path / "hypnos.measured.json").read_text())
    assert set(kept) == {"a"} and 1.25 <= kept["a"]["ratio"] <= 1.4
    assert [name for name in os.listdir(tmp_path) if name.startswith(".")] == []  # no temp file left
    second = start()
    try:
        planned = second.get("a").estimate().weight_bytes
        assert abs(planned - kept["a"]["ratio"] * 100 * MiB) < MiB
        await second.move("a", T1)  # booked at the corrected estimate: the measure agrees, nothing to rebook
        a = entry(second, "a")
        assert a.load_booked_bytes is not None and a.load_booked_bytes >= 125 * MiB
    finally:
        await second.shutdown()


async def test_a_measure_below_the_booking_in_host_memory_keeps_the_kv_booked() -> None:
    # 130 MiB of weights by the estimate and 40 MiB of KV (40 KiB x 1024 cells); the host holds 100 MiB after the
    # load, its KV pages not touched yet: booked at 100 + 40, not at 100
    a = hosted_model("a", layers=1, layer_mib=130, context_len=1024, kv_bytes_per_token=40 * 1024, hold_bytes=100 * MiB)
    scheduler = hosted_scheduler([a], vram_mib=400)
    try:
        await scheduler.move("a", T1)
        status = entry(scheduler, "a")
        assert status.load_measured_bytes is not None and status.load_measured_bytes < 110 * MiB
        assert abs(status.booked_bytes - (status.load_measured_bytes + 40 * MiB)) <= 2 * MiB
    finally:
        await scheduler.shutdown()


async def test_on_a_gpu_nvmls_figure_for_the_host_is_the_measure(monkeypatch: pytest.MonkeyPatch) -> None:
    # a discrete GPU (NVML there): the host's VRAM as NVML reports it for its pid books the model, not its RAM
    monkeypatch.setattr(proxy, "nvml_process_vram", lambda pid: 150 * MiB)
    settings = make_settings([model("a", 100, 0)], server={"isolation": "process", "shutdown_grace_secs": 5.0})
    gpu = StaticHardware(vram_bytes=1024 * MiB, vram_free=1024 * MiB, topology="DiscretePcie")
    scheduler = Scheduler(settings, {"fake": fake_engine_kind()}, hardware=gpu)
    try:
        await scheduler.move("a", T1)
        a = entry(scheduler, "a")
        assert a.load_measured_bytes == 150 * MiB and abs(a.booked_bytes - 150 * MiB) < MiB
        assert a.engine_process is not None and a.engine_process.vram_bytes == 150 * MiB
    finally:
        await scheduler.shutdown()
