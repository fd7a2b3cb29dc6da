"""CORS (section 1): loopback origins by default, server.allowed_origins with `http://host:*` wildcards."""

from __future__ import annotations

import re

from hypnos.errors import HypnosError
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from hypnos_server.asgi.paths import http_method
from hypnos_server.errors import send_error

ALLOWED_METHODS = "GET, POST, OPTIONS"
EXPOSED_HEADERS = ", ".join(
    [
        "x-request-id",
        "request-id",
        "x-hypnos-estimated-wait-ms",
        "x-hypnos-previous-tier",
        "x-hypnos-gpu-layers",
        "x-hypnos-switch-ms",
        "x-hypnos-inference-ms",
        "x-hypnos-audio-secs",
        "x-hypnos-rtf",
        "retry-after",
    ]
)
DEFAULT_ALLOWED_HEADERS = "authorization, content-type, x-hypnos-next-model, x-hypnos-deadline-ms, x-hypnos-workflow"
LOOPBACK = re.compile(r"^https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$", re.IGNORECASE)


class OriginPolicy:
    """Decides whether a browser origin may call the API."""

    def __init__(self, allowed_origins: list[str]) -> None:
        self.allow_all = "*" in allowed_origins
        patterns = [LOOPBACK]
        for origin in allowed_origins:
            origin = origin.strip().rstrip("/")
            if not origin or origin == "*":
                continue
            if origin.endswith(":*"):
                patterns.append(re.compile("^" + re.escape(origin[:-2]) + r"(:\d+)?$", re.IGNORECASE))
            else:
                patterns.append(re.compile("^" + re.escape(origin) + "$", re.IGNORECASE))
        self.patterns = patterns

    def allows(self, origin: str) -> bool:
        """True when this origin may call the API."""
        return self.allow_all or any(pattern.match(origin) for pattern in self.patterns)


class CorsLayer:
    """Answers preflights itself and adds the CORS headers to responses for allowed origins."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle a preflight, or pass the request on with CORS headers added to its response."""
        headers = {key.lower(): value for key, value in scope.get("headers", [])}
        origin_raw = headers.get(b"origin")
        if origin_raw is None:
            await self.app(scope, receive, send)
            return
        origin = origin_raw.decode("latin-1")
        allowed = self.policy.allows(origin)
        if http_method(scope) == "OPTIONS" and b"access-control-request-method" in headers:
            if not allowed:
                await send_error(scope, send, refused(origin))
                return
            requested = headers.get(b"access-control-request-headers", b"").decode("latin-1").strip()
            await _send_preflight(send, origin, requested or DEFAULT_ALLOWED_HEADERS)
            return
        if not allowed:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [
                    (b"access-control-allow-origin", origin_raw),
                    (b"access-control-expose-headers", EXPOSED_HEADERS.encode()),
                    (b"vary", b"Origin"),
                ]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_cors)


def refused(origin: str) -> HypnosError:
    """403 for a preflight from an origin that is not allowed."""
    return HypnosError(403, "permission_denied", f"The origin {origin} is not allowed (server.allowed_origins)")


async def _send_preflight(send: Send, origin: str, allow_headers: str) -> None:
    headers = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
        (b"access-control-allow-headers", allow_headers.encode("latin-1")),
        (b"access-control-expose-headers", EXPOSED_HEADERS.encode()),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
