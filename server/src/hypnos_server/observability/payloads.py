"""An ASGI layer that, while the request log is at trace, keeps the first bytes of each request and response body."""

from __future__ import annotations

from typing import Any

from hypnos_server.observability.request_log import MAX_PAYLOAD_CHARS, RequestLog
from hypnos_server.state import CONTEXT_KEY

# Enough bytes for the log's cut (4 bytes per character at worst) plus one, so that truncation shows.
KEEP_BYTES = MAX_PAYLOAD_CHARS * 4 + 1


class PayloadCapture:
    """Tees request and response bodies into the request record (request_payload / response_payload) at trace only."""

    def __init__(self, app: Any, log: RequestLog) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Pass through; at trace, copy at most KEEP_BYTES of each body onto the record."""
        context = scope.get("state", {}).get(CONTEXT_KEY) if scope["type"] == "http" else None
        if context is None or self.log.level != "trace":
            await self.app(scope, receive, send)
            return
        request_body = bytearray()
        response_body = bytearray()

        async def tee_receive() -> Any:
            message = await receive()
            if message["type"] == "http.request" and len(request_body) < KEEP_BYTES:
                request_body.extend(message.get("body", b"")[: KEEP_BYTES - len(request_body)])
            return message

        async def tee_send(message: Any) -> None:
            if message["type"] == "http.response.body" and len(response_body) < KEEP_BYTES:
                response_body.extend(message.get("body", b"")[: KEEP_BYTES - len(response_body)])
            await send(message)

        try:
            await self.app(scope, tee_receive, tee_send)
        finally:
            context.record.request_payload = bytes(request_body) or None
            context.record.response_payload = bytes(response_body) or None
