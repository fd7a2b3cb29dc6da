"""Scrape-time reads of the scheduler, whatever shape it offers them in."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import msgspec
from hypnos_server.observability.scheduler_view import scheduler_counters, scheduler_status


@dataclass
class Counters:
    promotions: int = 3
    evictions: int = 1
    load_failures: int = 0
    admissions_rejected: int = 2


class Snapshot(msgspec.Struct):
    models: list[dict]


def test_status_struct_becomes_builtins() -> None:
    scheduler = SimpleNamespace(status=lambda: Snapshot(models=[{"id": "a"}]))
    assert scheduler_status(scheduler) == {"models": [{"id": "a"}]}


def test_async_status_is_skipped_for_the_per_model_minimum() -> None:
    async def status() -> dict:
        return {}

    placement = SimpleNamespace(gpu_layers=4)
    state = SimpleNamespace(
        id="m", tier="tier1_gpu_vram", placement=placement, active_leases=1, total_requests_served=7
    )
    scheduler = SimpleNamespace(status=status, models=lambda: [state])
    models = scheduler_status(scheduler)["models"]  # type: ignore[index]
    assert models == [
        {
            "id": "m",
            "current_tier": "tier1_gpu_vram",
            "placement": {"gpu_layers": 4},
            "active_leases": 1,
            "total_requests_served": 7,
            "load_failures": 0,
        }
    ]


def test_no_status_at_all() -> None:
    assert scheduler_status(object()) is None


def test_counters_as_method_attribute_or_on_tiers() -> None:
    expected = {"promotions": 3, "evictions": 1, "load_failures": 0, "admissions_rejected": 2}
    assert scheduler_counters(SimpleNamespace(counters=lambda: Counters())) == expected
    assert scheduler_counters(SimpleNamespace(counters=Counters())) == expected
    assert scheduler_counters(SimpleNamespace(tiers=SimpleNamespace(counters=Counters()))) == expected
    assert scheduler_counters(object()) is None
