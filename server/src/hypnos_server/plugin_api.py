"""What a plugin's own routes (the `hypnos_routes` hook) may use of the server: the one module they import.

Plugin routes go through the same request pipeline as the OpenAI routes (auth, key limits, request ids, the request
record) and reach models only through `InferenceRun` (one lease per request, client hang-ups cancel the work) or, for
a second model a route needs on the side (docling describing pictures with a vision model), `Scheduler.lease`.
Everything else in `hypnos_server` is internal and may change.
"""

from __future__ import annotations

from hypnos.scheduler import Lease, Scheduler

from hypnos_server.routes.inference import (
    InferenceRun,
    decode_json,
    encode,
    json_response,
    read_form,
    ready_guard,
)
from hypnos_server.state import HypnosState, RequestContext, hypnos_state, request_context

__all__ = [
    "HypnosState",
    "InferenceRun",
    "Lease",
    "RequestContext",
    "Scheduler",
    "decode_json",
    "encode",
    "hypnos_state",
    "json_response",
    "read_form",
    "ready_guard",
    "request_context",
]
