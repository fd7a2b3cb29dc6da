"""GET /health and GET /ready (section 3)."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get

from hypnos_server.routes.inference import json_response
from hypnos_server.state import hypnos_state

STOPPING_REASON = "shutting down"
NOT_READY_REASON = "startup tier initialization in progress"


@get("/health", sync_to_thread=False)
def health(request: Request[Any, Any, Any]) -> Response[bytes]:
    """200 as soon as the port is open: status, service, version, uptime."""
    state = hypnos_state(request)
    return json_response(
        {"status": "ok", "service": "hypnos", "version": state.version, "uptime_secs": state.uptime_secs}
    )


@get("/ready", sync_to_thread=False)
def ready(request: Request[Any, Any, Any]) -> Response[bytes]:
    """503 until the startup models are staged, then 200; 503 again once the server is stopping (SIGTERM), so that
    a load balancer stops sending it requests during its grace."""
    scheduler = hypnos_state(request).scheduler
    if not scheduler.ready:
        return json_response({"ready": False, "reason": NOT_READY_REASON}, status=503)
    if scheduler.stopping:
        return json_response({"ready": False, "reason": STOPPING_REASON}, status=503)
    return json_response({"ready": True})


ROUTES = [health, ready]
