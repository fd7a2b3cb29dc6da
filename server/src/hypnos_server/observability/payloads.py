"""An ASGI layer that, while the request log is at trace, keeps the first bytes of each request and response body."""

from __future__ import annotations

from typing import Any

from hypnos_server.observability.request_log import MAX_PAYLOAD_CHARS, RequestLog
from hypnos_server.state import CONTEXT_KEY, RequestRecord

# Enough bytes for the log's cut (4 bytes per character at worst) plus one, so that truncation shows.
KEEP_BYTES = MAX_PAYLOAD_CHARS * 4 + 1


class BodyTee:
    """The first KEEP_BYTES of a request's body and of its response's, put on its record for the log at trace."""

    def __init__(self) -> None:
        self.request = bytearray()
        self.response = bytearray()

    @staticmethod
    def _keep(into: bytearray, data: bytes) -> None:
        if len(into) < KEEP_BYTES:
            into.extend(data[: KEEP_BYTES - len(into)])

    def took(self, data: bytes) -> None:
        """Bytes the client sent."""
        self._keep(self.request, data)

    def gave(self, data: bytes) -> None:
        """Bytes the server sent back."""
        self._keep(self.response, data)

    def store(self, record: RequestRecord) -> None:
        """Put what was kept on the record (request_payload / response_payload)."""
        record.request_payload = bytes(self.request) or None
        record.response_payload = bytes(self.response) or None


def body_tee(log: RequestLog | None) -> BodyTee | None:
    """A tee for one request while the log is at trace, else None (nothing is copied)."""
    return BodyTee() if log is not None and log.level == "trace" else None


class PayloadCapture:
    """Tees request and response bodies into the request record (request_payload / response_payload) at trace only."""

    def __init__(self, app: Any, log: RequestLog) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Pass through; at trace, copy at most KEEP_BYTES of each body onto the record."""
        context = scope.get("state", {}).get(CONTEXT_KEY) if scope["type"] == "http" else None
        tee = body_tee(self.log)
        if context is None or tee is None:
            await self.app(scope, receive, send)
            return

        async def tee_receive() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                tee.took(message.get("body", b""))
            return message

        async def tee_send(message: Any) -> None:
            if message["type"] == "http.response.body":
                tee.gave(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, tee_receive, tee_send)
        finally:
            tee.store(context.record)
