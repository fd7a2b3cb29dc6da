"""Observability: request log, Prometheus metrics, latency percentiles per route and per workflow (spec 14-16)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypnos_server.observability.hub import Observability
from hypnos_server.observability.routes import observability_routes

if TYPE_CHECKING:
    from hypnos_server.state import HypnosState

__all__ = ["Observability", "install_observability", "observability_routes"]


def install_observability(state: HypnosState) -> tuple[Observability, list[Any]]:
    """Build this app's Observability, register its request observer, and return it with the routes to mount."""
    from hypnos_server.observability.scheduler_view import scheduler_counters, scheduler_status

    scheduler = state.scheduler
    obs = Observability(
        state.settings,
        status=lambda: scheduler_status(scheduler),
        scheduler_counters=lambda: scheduler_counters(scheduler),
        started_unix=state.started_at,
    )
    state.observers.append(obs.observe)
    return obs, observability_routes(obs)
