"""What a plugin's own routes (the `hypnos_routes` hook) and speech detectors (`hypnos_speech_detectors`) may use of
the server: the one module they import.

Plugin routes go through the same request pipeline as the OpenAI routes (auth, key limits, request ids, the request
record) and reach models only through `InferenceRun` (one lease per request, client hang-ups cancel the work) or, for
a second model a route needs on the side (documents describing pictures with a vision model), `model_leases(request)`.
A route checks a model with `check_serving` and reads its engine table with `engine_table`; a handler marked
`opt={ADMIN_OPT: True}` (or a router so marked) answers admin keys only. The scheduler class is not part of this
API. Everything else in `hypnos_server` is internal and may change.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from hypnos.scheduler import Lease
from hypnos.types import Modality
from litestar.connection import ASGIConnection

from hypnos_server.asgi.auth import ADMIN_OPT
from hypnos_server.realtime.vad import SpeechDetector, SpeechDetectorKind
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
    "ADMIN_OPT",
    "HypnosState",
    "InferenceRun",
    "Lease",
    "ModelLeases",
    "RequestContext",
    "SpeechDetector",
    "SpeechDetectorKind",
    "check_serving",
    "decode_json",
    "encode",
    "engine_table",
    "hypnos_state",
    "json_response",
    "model_leases",
    "read_form",
    "ready_guard",
    "request_context",
]

Connection = ASGIConnection[Any, Any, Any, Any]


class ModelLeases(Protocol):
    """Leases on models by id, as a route takes one on the side: `async with leases.lease(id, modality) as lease`."""

    def lease(
        self,
        model_id: str,
        modality: Modality | Iterable[Modality],
        *,
        deadline_ms: int | None = None,
        next_model: str | None = None,
    ) -> AbstractAsyncContextManager[Lease]:
        """Admit (429 / 503 / 404), promote to tier 1 if needed, and hold the model until the block ends."""
        ...


def model_leases(connection: Connection) -> ModelLeases:
    """Where the route leases a model on the side (this server's scheduler)."""
    return hypnos_state(connection).scheduler


def check_serving(connection: Connection, model_id: str, modality: Modality) -> None:
    """Refuse now (404 unknown, disabled, not installed, 400 another modality) unless the model serves `modality`."""
    hypnos_state(connection).scheduler.serving(model_id, modality)


def engine_table(connection: Connection, model_id: str, table: str) -> dict[str, Any]:
    """The model's `[models.<table>]` as configured (empty when it has none); the model must exist."""
    return dict(hypnos_state(connection).scheduler.get(model_id).config.engine_options.get(table) or {})
