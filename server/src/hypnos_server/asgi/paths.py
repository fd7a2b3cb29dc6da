"""Canonical request paths: what the router matches is exactly what auth, admin checks and limits decide on."""

from __future__ import annotations

import re

from hypnos.errors import HypnosError, clip, not_found
from litestar.types import Scope

TEMPLATE_PARAM = re.compile(r"\{([^}:]+)(?::([^}]*))?\}")


def http_method(scope: Scope) -> str:
    """The request's method: the pipeline's layers see HTTP scopes only (a websocket's scope has none)."""
    return str(scope.get("method", ""))


def template_pattern(template: str) -> re.Pattern[str]:
    """The regex a raw path matches when this route template (`/v1/models/{model_id:str}`) serves it."""
    parts: list[str] = []
    position = 0
    for match in TEMPLATE_PARAM.finditer(template):
        parts.append(re.escape(template[position : match.start()]))
        parts.append(".+" if match.group(2) == "path" else "[^/]+")
        position = match.end()
    parts.append(re.escape(template[position:]))
    return re.compile("^" + "".join(parts) + "$")


# Percent-encoded '/', '\', '.' and NUL: a client that needs them in a path segment has no route here.
_ENCODED = (b"%2f", b"%5c", b"%2e", b"%00")


def is_canonical(scope: Scope) -> bool:
    """True when the path has no empty, '.' or '..' segment, no backslash, control character or encoded separator."""
    path: str = scope["path"]
    if not path.startswith("/") or "//" in path or "\\" in path:
        return False
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path):
        return False
    if any(segment in (".", "..") for segment in path.split("/")):
        return False
    raw = scope.get("raw_path")
    if raw:
        lowered = bytes(raw).partition(b"?")[0].lower()
        if any(encoded in lowered for encoded in _ENCODED):
            return False
    return True


def non_canonical(scope: Scope) -> HypnosError:
    """404 not_found for a path in a non-canonical form (the router never answers those); a doubled slash is named,
    as a client's base URL with a trailing slash makes one (litellm's Anthropic provider: `//v1/messages`)."""
    path = clip(scope["path"])
    hint = " (an empty segment: does the client's base URL end with a slash?)" if "//" in scope["path"] else ""
    return not_found(f"No route for {http_method(scope)} {path}: the path is not in canonical form{hint}")
