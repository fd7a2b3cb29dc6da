"""Helpers for the scheduler tests: settings with fake models, a scheduler on static hardware, a manual clock."""

from __future__ import annotations

from typing import Any

from hypnos.config import MiB, Settings, settings_from_mapping
from hypnos.hardware import StaticHardware
from hypnos.scheduler import Scheduler
from hypnos.testing import fake_engine_kind


class ManualClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def fake_model(
    model_id: str,
    *,
    modality: str = "text_generation",
    layers: int = 4,
    layer_mib: int = 100,
    load_ms: float = 0.0,
    priority: str = "normal",
    slots: int = 1,
    initial_tier: str = "tier3_nvme_ssd",
    context_len: int = 1024,
    **fake: Any,
) -> dict[str, Any]:
    """A [[models]] entry served by the fake engine; sizes in MiB, KV 1 KiB/token, 0 non-layer/workspace."""
    options = {
        "layers": layers,
        "layer_bytes": layer_mib * MiB,
        "non_layer_bytes": 0,
        "workspace_bytes": 0,
        "kv_bytes_per_token": 1024,
        "load_ms": load_ms,
    }
    options.update(fake)
    return {
        "id": model_id,
        "modality": modality,
        "engine": "fake",
        "priority": priority,
        "slots": slots,
        "initial_tier": initial_tier,
        "context_len": context_len,
        "fake": options,
    }


def make_settings(
    models: list[dict[str, Any]],
    *,
    hardware: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
) -> Settings:
    """Settings from plain mappings."""
    raw: dict[str, Any] = {"models": models}
    if hardware:
        raw["hardware"] = hardware
    if limits:
        raw["limits"] = limits
    # the scheduler's own tests look into the fake engines: in this process unless a test asks for hosts
    raw["server"] = {"isolation": "thread", **(server or {})}
    return settings_from_mapping(raw)


def make_scheduler(
    models: list[dict[str, Any]],
    *,
    vram_mib: int = 1024,
    ram_mib: int = 4096,
    clock: ManualClock | None = None,
    hardware: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    cores: list[int] | None = None,
) -> Scheduler:
    """A scheduler over fake engines on a simulated device of vram_mib (tier 2 = half of ram_mib) with `cores`
    (default: CPUs 0-3) to share out."""
    settings = make_settings(models, hardware=hardware, limits=limits, server=server)
    probe = StaticHardware(vram_bytes=vram_mib * MiB, ram_bytes=ram_mib * MiB, cores=cores or (0, 1, 2, 3))
    kwargs: dict[str, Any] = {"hardware": probe}
    if clock is not None:
        kwargs["clock"] = clock
    return Scheduler(settings, {"fake": fake_engine_kind()}, **kwargs)
