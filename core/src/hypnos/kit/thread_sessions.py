"""Sessions per thread count, for the libraries that fix a session's threads when they make it (ONNX Runtime's intra-op
pool and its spin policy, CTranslate2's intra_threads): an engine keeps a few, made on first use from the weights it
holds in RAM, and runs each call on the one that matches the model's core share now (Engine.follow_cores)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from hypnos.config import ModelConfig

S = TypeVar("S")

# a model whose one session holds more than this keeps one session unless [models.process] thread_sessions says more
SMALL_SESSION_BYTES = 1024**3


@dataclass(frozen=True)
class SessionKey:
    """How a session computes: its intra-op threads (0: the library's default) and whether its idle threads spin."""

    threads: int
    spin: bool


def session_limit(model: ModelConfig, session_bytes: int, device: str, accelerator: str = "") -> int:
    """How many sessions the model keeps: `[models.process] thread_sessions`, else 2 while one session holds at most
    SMALL_SESSION_BYTES, else 1; always 1 off the CPU (`device` other than cpu, or auto where the `accelerator` names
    CUDA: an accelerator's session would hold its weights twice)."""
    if device != "cpu" and not (device == "auto" and "cuda" not in accelerator.lower()):
        return 1
    configured = model.process.thread_sessions
    if configured is not None:
        return configured
    return 2 if session_bytes <= SMALL_SESSION_BYTES else 1


def sessions_bytes(session_bytes: int, source_bytes: int, limit: int) -> int:
    """What the sessions hold at most: `limit` of them, plus the RAM copy they are made from when there are several."""
    return session_bytes * limit + (source_bytes if limit > 1 else 0)


class ThreadSessions(Generic[S]):
    """One built model's sessions by SessionKey, made by `make` on first use, at most `limit` kept (the least recently
    used dropped first); `threads`/`spin` are the configured session's. With limit 1 the model keeps that one session
    whatever its share (the engine host is pinned to the share). Used from the model's worker thread only."""

    def __init__(self, make: Callable[[SessionKey], S], *, threads: int, spin: bool, limit: int) -> None:
        self._make = make
        self.home = SessionKey(max(0, threads), spin)
        self.limit = max(1, limit)
        self._kept: OrderedDict[SessionKey, S] = OrderedDict()
        self.last: SessionKey | None = None  # the key of the session handed out last

    def key(self, core_threads: int | None, alone: bool) -> SessionKey:
        """The session a call runs on: the share's threads (at most the configured ones where set), spinning only
        while the model computes alone (and only if the configured session spins); the configured session before any
        share or with limit 1."""
        if self.limit == 1 or core_threads is None:
            return self.home
        threads = min(core_threads, self.home.threads) if self.home.threads else core_threads
        return SessionKey(max(1, threads), self.home.spin and alone)

    def session(self, core_threads: int | None, alone: bool) -> S:
        """The session for this share: a kept one, else made now (the least recently used dropped first)."""
        key = self.key(core_threads, alone)
        if key in self._kept:
            self._kept.move_to_end(key)
        else:
            while len(self._kept) >= self.limit:
                self._kept.popitem(last=False)
            self._kept[key] = self._make(key)
        self.last = key
        return self._kept[key]

    def threads(self, core_threads: int | None) -> int | None:
        """The intra-op threads a call computes with under this share (None: the library's default)."""
        return self.key(core_threads, False).threads or None

    def picked(self) -> S | None:
        """The session handed out last, while it is kept (None before any)."""
        return self._kept.get(self.last) if self.last is not None else None

    def keys(self) -> list[SessionKey]:
        """The kept sessions' keys, least recently used first."""
        return list(self._kept)

    def clear(self) -> None:
        """Drop every session (tier 1 -> 2)."""
        self._kept.clear()
        self.last = None
