"""API keys (section 2): the key ring built from the settings, bearer parsing and the 401 it answers."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from hypnos.config import Settings
from hypnos.errors import HypnosError

MISSING_KEY = "Missing API key. Send it as `Authorization: Bearer <key>` (server.api_keys)."
MALFORMED_KEY = "Malformed Authorization header. Send it as `Authorization: Bearer <key>`."
UNKNOWN_KEY = "Invalid API key. Send one of the server's keys as `Authorization: Bearer <key>`."


def key_digest(key: str) -> str:
    """The sha256 hex digest of a key: what the ring stores and what unlabelled keys are named after."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class ApiKey:
    """One configured key, known by its label (never by its value) with its admin right and limits."""

    label: str
    admin: bool
    requests_per_minute: int | None = None
    max_concurrent: int | None = None
    tokens_per_day: int | None = None


class KeyRing:
    """Every configured key, looked up by digest; empty when the server has no keys (auth off)."""

    def __init__(self, settings: Settings) -> None:
        self._keys: dict[str, ApiKey] = {}
        for value in settings.server.api_keys:
            digest = key_digest(value.strip())
            self._keys.setdefault(digest, ApiKey(label=f"key-{digest[:8]}", admin=True))
        for entry in settings.server.keys:
            digest = key_digest(entry.key.strip())
            self._keys[digest] = ApiKey(
                label=entry.label or f"key-{digest[:8]}",
                admin=entry.admin,
                requests_per_minute=entry.requests_per_minute,
                max_concurrent=entry.max_concurrent,
                tokens_per_day=entry.tokens_per_day,
            )

    @property
    def enabled(self) -> bool:
        """True when at least one key is configured."""
        return bool(self._keys)

    def lookup(self, value: str) -> ApiKey | None:
        """The key with this value, or None."""
        return self._keys.get(key_digest(value))

    def labelled(self, label: str) -> ApiKey | None:
        """The key with this label (a batch runs as the key that created it), or None."""
        return next((key for key in self._keys.values() if key.label == label), None)

    def authenticate(self, header: str | None) -> ApiKey:
        """The key an Authorization header names, or the spec's 401."""
        if header is None or not header.strip():
            raise unauthorized(MISSING_KEY)
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise unauthorized(MALFORMED_KEY)
        key = self.lookup(value.strip())
        if key is None:
            raise unauthorized(UNKNOWN_KEY)
        return key


def unauthorized(message: str) -> HypnosError:
    """401 in the OpenAI shape, with WWW-Authenticate."""
    return HypnosError(
        401,
        "invalid_request_error",
        message,
        code="invalid_api_key",
        headers={"WWW-Authenticate": 'Bearer realm="hypnos"'},
    )
