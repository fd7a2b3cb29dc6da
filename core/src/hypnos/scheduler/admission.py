"""Admission: workload profiles, the estimated wait, and the deadline check (503 deadline_unmeetable)."""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

from hypnos.config import LimitsConfig, ProfileObjective, ServerConfig
from hypnos.errors import HypnosError
from hypnos.scheduler.budgets import Budgets
from hypnos.scheduler.model_state import ModelState
from hypnos.types import MemoryTier

# Built-in workload profiles ([server] profile = "<name>"): (metric, target_ms).
PROFILES = MappingProxyType(
    {
        "voice_assistant": ("first_audio", 1500),
        "interactive_chat": ("first_token", 2000),
        "chat": ("first_token", 2000),
        "batch": ("throughput", None),
        "throughput": ("throughput", None),
    }
)


def profile_objective(name: str | None) -> ProfileObjective | None:
    """The objective of a named profile (None when unset or unknown)."""
    known = PROFILES.get(name) if name is not None else None
    if known is None:
        return None
    metric: Any = known[0]  # one of ProfileObjective's metrics, as PROFILES lists them
    return ProfileObjective(metric=metric, target_ms=known[1])


def implicit_deadline_ms(server: ServerConfig, limits: LimitsConfig) -> int | None:
    """With limits.overload = "shed", the profile's target_ms acts as every request's deadline."""
    if limits.overload != "shed":
        return None
    objective = profile_objective(server.profile)
    return objective.target_ms if objective is not None else None


def effective_deadline_ms(explicit: int | None, implicit: int | None) -> int | None:
    """The tighter of the request's x-hypnos-deadline-ms and the implicit one."""
    if explicit is None:
        return implicit
    if implicit is None:
        return explicit
    return min(explicit, implicit)


def estimated_wait_ms(state: ModelState, budgets: Budgets, priority: int = 0) -> int | None:
    """Requests ahead beyond the slots x average service time, plus a load when not resident (for an interactive
    request, slots held by yielding batch work and batch work queued are not ahead).

    None while every slot is busy and no service time was measured yet.
    """
    gate = state.gate
    yielding = gate.yieldable if priority >= 0 else 0
    ahead = gate.in_use - yielding + gate.queued_from(priority)
    wait = 0.0
    if ahead >= gate.capacity:
        service = state.service_ms
        if service is None:
            return None
        wait += (ahead - gate.capacity + 1) * service / gate.capacity
    if state.tier != MemoryTier.TIER1 or state.transition is not None:
        wait += state.reload_estimate_ms(budgets, state.tier)
    return math.ceil(wait)


def deadline_unmeetable(model_id: str, estimate_ms: int, deadline_ms: int) -> HypnosError:
    """503 deadline_unmeetable with a Retry-After near the estimate (whole seconds, at least 1)."""
    return HypnosError(
        503,
        "deadline_unmeetable",
        f"the model `{model_id}` could start this request in about {estimate_ms} ms, "
        f"longer than its deadline of {deadline_ms} ms",
        retry_after=max(1, math.ceil(estimate_ms / 1000)),
    )
