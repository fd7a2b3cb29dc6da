"""The auth layer (section 2): the bearer key on protected paths, admin checks, per-key limits (keys.py: the ring)."""

from __future__ import annotations

import logging
import re

from hypnos.config import Settings
from hypnos.errors import HypnosError
from litestar.types import ASGIApp, Receive, Scope, Send

from hypnos_server.asgi.keylimits import KeyLimiter
from hypnos_server.asgi.keys import KeyRing
from hypnos_server.errors import send_error
from hypnos_server.state import request_context

logger = logging.getLogger(__name__)

# "/": the playground page (its calls send the key); "/docs": the API reference page
OPEN_PATHS = frozenset({"/health", "/ready", "/", "/schema", "/docs"})
OPEN_PREFIXES = ("/playground/", "/schema/", "/docs/")  # the playground's assets, the OpenAPI schema and its viewer
# The routes that change what every key gets: the model pool, a model's service and placement, the request log.
_ADMIN_PATHS = (
    ("POST", re.compile(r"^/v1/models/?$")),
    ("PUT", re.compile(r"^/v1/models/[^/]+/?$")),
    ("DELETE", re.compile(r"^/v1/models/[^/]+/?$")),
    ("POST", re.compile(r"^/v1/models/[^/]+/(enable|disable|moe-offload)/?$")),
    ("POST", re.compile(r"^/v1/memory/(tier|kv-park)/?$")),
    ("POST", re.compile(r"^/v1/logs/level/?$")),
    ("DELETE", re.compile(r"^/v1/logs/?$")),
)


def forbidden(method: str, path: str) -> HypnosError:
    """403 for a non-admin key on a route that changes the pool, a model's service or placement, or the log."""
    return HypnosError(403, "permission_denied", f"{method} {path} needs an admin key")


def needs_admin(method: str, path: str) -> bool:
    """True for the admin routes: the pool, enable/disable, moe-offload, tier moves, KV parking, log level and clear."""
    return any(method == m and pattern.match(path) for m, pattern in _ADMIN_PATHS)


class AuthLayer:
    """Checks the bearer key on every path but the open ones, the admin right, and the key's limits.

    The pipeline has already refused non-canonical paths, so the path decided on here is the one the router matches.
    """

    def __init__(self, app: ASGIApp, settings: Settings, keys: KeyRing, limiter: KeyLimiter) -> None:
        self.app = app
        self.settings = settings
        self.keys = keys
        self.limiter = limiter

    def _protected(self, path: str) -> bool:
        """Every path needs the key but /health, /ready, the playground, the schema and (unless closed) /metrics."""
        if path == "/metrics":
            return self.settings.server.metrics_require_auth
        return path not in OPEN_PATHS and not path.startswith(OPEN_PREFIXES)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate, admit against the key's limits, and hold the concurrency permit until the last byte."""
        path = scope["path"]
        if not self.keys.enabled or not self._protected(path):
            await self.app(scope, receive, send)
            return
        context = request_context(scope)  # type: ignore[arg-type]
        header = _header(scope, b"authorization")
        if header is None and (api_key := _header(scope, b"x-api-key")) is not None:
            header = f"Bearer {api_key}"  # Anthropic's clients send the key as x-api-key
        try:
            key = self.keys.authenticate(header)
            context.key = key
            context.record.key = key.label
            if needs_admin(scope["method"], path) and not key.admin:
                raise forbidden(scope["method"], path)
            permit = self.limiter.admit(key, concurrent=not _controls_stored_response(scope["method"], path))
        except HypnosError as error:
            if error.status == 429:
                logger.info("key %s refused: %s", context.record.key, error.code)
            await send_error(scope, send, error)
            return
        context.release_permit = permit.release
        try:
            await self.app(scope, receive, send)
        finally:
            if (release := context.take_permit()) is not None:  # None: a background run took it along
                release()


def _controls_stored_response(method: str, path: str) -> bool:
    """A read, cancel or delete of a stored response: it takes no concurrency slot, so that a key whose slots its
    background responses hold can still poll, follow, cancel and delete them."""
    if not path.startswith("/v1/responses/"):
        return False
    return method in ("GET", "DELETE") or (method == "POST" and path.endswith("/cancel"))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None
