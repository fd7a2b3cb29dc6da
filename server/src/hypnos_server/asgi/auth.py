"""The auth layer (section 2): the bearer key on protected paths, admin checks, per-key limits (keys.py: the ring)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from hypnos.config import Settings
from hypnos.errors import HypnosError
from litestar import Litestar
from litestar.types import ASGIApp, Receive, Scope, Send

from hypnos_server.asgi.keylimits import KeyLimiter
from hypnos_server.asgi.keys import KeyRing
from hypnos_server.asgi.paths import http_method, template_pattern
from hypnos_server.errors import send_error
from hypnos_server.state import request_context

logger = logging.getLogger(__name__)

# "/": the playground page (its calls send the key); "/docs": the API reference page
OPEN_PATHS = frozenset({"/health", "/ready", "/", "/schema", "/docs"})
OPEN_PREFIXES = ("/playground/", "/schema/", "/docs/")  # the playground's assets, the OpenAPI schema and its viewer
# The opt key that marks a route handler (or a router) admin-only: `@post(..., opt={ADMIN_OPT: True})`. The server's
# routes that change what every key gets carry it (the model pool, a model's service and placement, the request log),
# and a plugin's routes may.
ADMIN_OPT = "admin"


def forbidden(method: str, path: str) -> HypnosError:
    """403 for a non-admin key on an admin-only route."""
    return HypnosError(403, "permission_denied", f"{method} {path} needs an admin key")


class AdminRoutes:
    """The admin-only routes of an app: each handler whose opt marks it so, matched by method and path template."""

    def __init__(self, marked: Iterable[tuple[str, str]]) -> None:
        self._patterns = [(method, template_pattern(template)) for method, template in marked]

    @classmethod
    def of(cls, app: Litestar) -> AdminRoutes:
        """The app's handlers marked admin (the server's and the plugins' alike)."""
        marked = []
        for route in app.routes:
            for handler in getattr(route, "route_handlers", ()):
                if handler.opt.get(ADMIN_OPT):
                    marked += [(method, route.path) for method in getattr(handler, "http_methods", ())]
        return cls(marked)

    def needs_admin(self, method: str, path: str) -> bool:
        """True when the route serving this method and path is admin-only."""
        clean = path.rstrip("/") or "/"
        return any(method == wanted and pattern.match(clean) for wanted, pattern in self._patterns)


class AuthLayer:
    """Checks the bearer key on every path but the open ones, the admin right, and the key's limits.

    The pipeline has already refused non-canonical paths, so the path decided on here is the one the router matches.
    """

    def __init__(
        self, app: ASGIApp, settings: Settings, keys: KeyRing, limiter: KeyLimiter, admin: AdminRoutes
    ) -> None:
        self.app = app
        self.admin = admin
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
            method = http_method(scope)
            if self.admin.needs_admin(method, path) and not key.admin:
                raise forbidden(method, path)
            permit = self.limiter.admit(key, concurrent=not _controls_stored_response(method, path))
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
