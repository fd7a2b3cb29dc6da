"""GET /v1/realtime: the WebSocket handshake (key by bearer header or the browser SDK's subprotocol, origin, model)
and the session it starts."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from hypnos.errors import HypnosError
from hypnos.types import Modality
from litestar import WebSocket, websocket

from hypnos_server.asgi.cors import OriginPolicy
from hypnos_server.asgi.keys import ApiKey
from hypnos_server.realtime.connection import CLOSE_POLICY, RealtimeSession
from hypnos_server.realtime.events import error_event
from hypnos_server.realtime.session import first_model
from hypnos_server.state import hypnos_state

logger = logging.getLogger(__name__)

KEY_PROTOCOL = "openai-insecure-api-key."
BETA_PROTOCOL = "openai-beta.realtime-v1"
CLOSE_TRY_AGAIN = 1013


def _subprotocols(socket: WebSocket[Any, Any, Any]) -> list[str]:
    raw = socket.headers.get("sec-websocket-protocol", "")
    listed = [str(part) for part in socket.scope.get("subprotocols") or []]
    return list(dict.fromkeys([*listed, *(part.strip() for part in raw.split(",") if part.strip())]))


def _authorization(socket: WebSocket[Any, Any, Any], protocols: list[str]) -> str | None:
    header = socket.headers.get("authorization")
    if header is None and (api_key := socket.headers.get("x-api-key")) is not None:
        header = f"Bearer {api_key}"
    for protocol in protocols:
        if header is None and protocol.startswith(KEY_PROTOCOL):
            header = f"Bearer {protocol[len(KEY_PROTOCOL) :]}"
    return header


def _same_origin(socket: WebSocket[Any, Any, Any], origin: str) -> bool:
    host = socket.headers.get("host", "")
    return origin.partition("://")[2].rstrip("/") == host


async def _refuse(socket: WebSocket[Any, Any, Any], error: HypnosError, code: int) -> None:
    """Accept, say why in an `error` event, close with `code` (a refused handshake tells a browser nothing)."""
    await socket.accept()
    event = error_event(error.message, error.code or error.type, error.type)
    await socket.send_text(msgspec.json.encode(event).decode())
    await socket.close(code=code, reason=error.message[:120])


@websocket("/v1/realtime")
async def realtime(socket: WebSocket[Any, Any, Any]) -> None:
    """A realtime voice session speaking the OpenAI Realtime event protocol."""
    state = hypnos_state(socket)
    protocols = _subprotocols(socket)
    origin = socket.headers.get("origin")
    if (
        origin
        and not _same_origin(socket, origin)
        and not OriginPolicy(state.settings.server.allowed_origins).allows(origin)
    ):
        await socket.close(code=CLOSE_POLICY, reason="origin not allowed")  # before accept: the handshake fails (403)
        return
    key: ApiKey | None = None
    permit = None
    if state.keys.enabled:
        try:
            key = state.keys.authenticate(_authorization(socket, protocols))
            permit = state.limiter.admit(key)
        except HypnosError as error:
            await _refuse(socket, error, CLOSE_POLICY if error.status == 401 else CLOSE_TRY_AGAIN)
            return
    try:
        scheduler = state.scheduler
        model = socket.query_params.get("model") or first_model(scheduler, Modality.TEXT_GENERATION) or ""
        try:
            if not scheduler.ready:
                raise HypnosError(503, "model_not_available", "The server is staging its startup models; retry soon")
            scheduler.serving(model, Modality.TEXT_GENERATION)
        except HypnosError as error:
            await _refuse(socket, error, CLOSE_TRY_AGAIN if error.status == 503 else CLOSE_POLICY)
            return
        beta = BETA_PROTOCOL in protocols or "realtime=v1" in socket.headers.get("openai-beta", "")
        chosen = "realtime" if "realtime" in protocols else None
        await socket.accept(subprotocols=chosen)
        await RealtimeSession(socket, state, key, model, beta=beta).serve()
    finally:
        if permit is not None:
            permit.release()


ROUTES = [realtime]
