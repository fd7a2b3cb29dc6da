"""Scrape-time reads of the scheduler: its status snapshot (spec shape) and its totals, as plain builtins."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Any

import msgspec

logger = logging.getLogger(__name__)


def _builtins(value: Any) -> Any:
    if value is None or isinstance(value, dict):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return msgspec.to_builtins(value)


def scheduler_status(scheduler: Any) -> dict[str, Any] | None:
    """The scheduler's GET /v1/memory/status snapshot as builtins; a per-model minimum when it offers none."""
    for name in ("status", "memory_status"):
        method = getattr(scheduler, name, None)
        if callable(method):
            value = method()
            if inspect.isawaitable(value):  # an async status cannot be read inside a synchronous scrape
                close = getattr(value, "close", None)
                if close is not None:
                    close()
                break
            return _builtins(value)
    models = getattr(scheduler, "models", None)
    if not callable(models):
        return None
    return {
        "models": [
            {
                "id": state.id,
                "current_tier": str(state.tier),
                "placement": {"gpu_layers": state.placement.gpu_layers},
                "active_leases": state.active_leases,
                "total_requests_served": state.total_requests_served,
                "load_failures": getattr(state, "load_failures", 0),
            }
            for state in models()
        ]
    }


def scheduler_counters(scheduler: Any) -> dict[str, Any] | None:
    """promotions / evictions / load_failures / admissions_rejected totals when the scheduler keeps them."""
    for owner in (scheduler, getattr(scheduler, "tiers", None)):
        counters = getattr(owner, "counters", None) if owner is not None else None
        if counters is not None and not callable(counters):
            return _builtins(counters)
        if callable(counters):
            return _builtins(counters())
    return None
