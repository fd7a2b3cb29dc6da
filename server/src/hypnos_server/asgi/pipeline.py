"""The HTTP pipeline around Litestar: request id, CORS, body limit, timeout, auth; the record finalized in one place."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from hypnos_server.asgi.auth import AdminRoutes, AuthLayer
from hypnos_server.asgi.cors import CorsLayer, OriginPolicy
from hypnos_server.asgi.limits import BodyLimitLayer, BodyTimeoutLayer, TimeoutLayer
from hypnos_server.asgi.paths import http_method, is_canonical, non_canonical
from hypnos_server.errors import as_hypnos_error, send_error
from hypnos_server.state import CONTEXT_KEY, RequestContext, RequestRecord, new_request_id

if TYPE_CHECKING:
    from hypnos_server.state import HypnosState

logger = logging.getLogger(__name__)


# x-request-id, and request-id with the same value: Anthropic's header, which its SDKs read as `request_id`
REQUEST_ID_HEADERS = (b"x-request-id", b"request-id")


class RequestPipeline:
    """Outermost layer: gives every response its x-request-id (and request-id) and finalizes the request's record
    after the last byte."""

    def __init__(self, state: HypnosState, inner: ASGIApp, admin: AdminRoutes) -> None:
        self.state = state
        settings = state.settings
        app: ASGIApp = AuthLayer(inner, settings, state.keys, state.limiter, admin)
        app = TimeoutLayer(app, settings.limits.request_timeout_secs)
        app = BodyLimitLayer(app, settings.limits.max_body_bytes)
        app = BodyTimeoutLayer(app, settings.limits.body_timeout_secs, settings.limits.min_body_bytes_per_sec)
        self.app: ASGIApp = CorsLayer(app, OriginPolicy(settings.server.allowed_origins))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run one HTTP request through the layers and Litestar, then finalize its record."""
        headers = {key.lower(): value for key, value in scope.get("headers", [])}
        record = RequestRecord(
            id=new_request_id(),
            method=http_method(scope),
            path=scope["path"],
            started_at=time.time(),
            workflow=_text(headers.get(b"x-hypnos-workflow")),
            workflow_end=_text(headers.get(b"x-hypnos-workflow-end")) == "true",
        )
        context = RequestContext(record=record)
        scope.setdefault("state", {})[CONTEXT_KEY] = context
        request_id = record.id.encode()
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                record.status = message["status"]
                raw = [(k, v) for k, v in message.get("headers", []) if k.lower() not in REQUEST_ID_HEADERS]
                message["headers"] = [*raw, *((name, request_id) for name in REQUEST_ID_HEADERS)]
            await send(message)

        try:
            if is_canonical(scope):
                await self.app(scope, receive, send_with_id)
            else:  # refused before CORS, limits and auth: no layer ever sees a path the router would read otherwise
                await send_error(scope, send_with_id, non_canonical(scope))
        except Exception as exc:
            if not started:
                await send_error(scope, send_with_id, as_hypnos_error(exc, http_method(scope), scope["path"]))
            else:  # the headers are out: nothing more can be told to the client
                logger.error("request %s failed after its headers were sent", record.id, exc_info=exc)
                record.error = record.error or f"{type(exc).__name__}: {exc}"
                record.error_type = record.error_type or "server_error"
        except BaseException:
            record.error = record.error or "cancelled"
            record.error_type = record.error_type or "cancelled"
            raise
        finally:
            await context.run_closers()
            self._finalize(scope, context)

    def _finalize(self, scope: Scope, context: RequestContext) -> None:
        record = context.record
        if record.route is None:
            handler = scope.get("route_handler")
            paths = getattr(handler, "paths", None)
            if paths:
                record.route = sorted(paths)[0]
        context.finish(self.state.limiter)
        self.state.notify(record)


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1").strip() if value is not None else None
