"""Observability: request log, Prometheus metrics, latency percentiles per route and per workflow (spec 14-16)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypnos_server.observability.hub import Observability
from hypnos_server.observability.payloads import PayloadCapture
from hypnos_server.observability.route_templates import RouteTemplates
from hypnos_server.observability.routes import observability_routes

if TYPE_CHECKING:
    from hypnos_server.state import HypnosState

__all__ = ["Observability", "install_observability", "observability_of", "observability_routes", "observe_dispatch"]


def install_observability(state: HypnosState) -> list[Any]:
    """Build this app's Observability, register its observer and latency provider; return the routes to mount."""
    scheduler = state.scheduler
    obs = Observability(
        state.settings,
        status=scheduler.status,
        scheduler_counters=lambda: scheduler.counters,
        started_unix=state.started_at,
    )
    state.observers.append(obs.observe)
    scheduler.latency_provider = obs.latency  # read by the scheduler's status() for `latency`
    return observability_routes(obs)


def observe_dispatch(state: HypnosState, app: Any) -> Any:
    """The app's dispatch wrapped for observability: route templates learned from the app, bodies kept at trace."""
    obs = observability_of(state)
    if obs is None:
        return app.dispatch
    obs.route_templates = RouteTemplates(route.path for route in app.routes)
    return PayloadCapture(app.dispatch, obs.log)


def observability_of(state: HypnosState) -> Observability | None:
    """The Observability whose observer is registered on this state, if any."""
    for observer in state.observers:
        owner = getattr(observer, "__self__", None)
        if isinstance(owner, Observability):
            return owner
    return None
