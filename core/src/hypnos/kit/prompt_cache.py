"""The prompt cache's keys and the engine side's saver: chain hashes of fixed-size token blocks under a namespace
(model file, context layout, isolation scope), and a thread that hands saved states to the store off the hot path."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypnos.engine import PromptCache, SavedState

logger = logging.getLogger(__name__)

BLOCK_TOKENS = 64  # tokens per hashed block: a lookup walks len(prompt) / BLOCK_TOKENS hashes
MAX_PENDING_SAVES = 2  # states waiting for the store; past it one is dropped (host memory stays bounded)


def cache_namespace(*parts: Any) -> str:
    """A namespace hash of what a saved state must match (model file identity, context layout, scope)."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the shared prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def block_hashes(namespace: str, tokens: Iterable[int]) -> list[str]:
    """The chain hashes of the full BLOCK_TOKENS-token blocks of `tokens`: hash i covers blocks 0..i."""
    tokens = list(tokens)
    out: list[str] = []
    previous = bytes.fromhex(namespace)
    for end in range(BLOCK_TOKENS, len(tokens) + 1, BLOCK_TOKENS):
        block = b"".join(t.to_bytes(4, "little", signed=True) for t in tokens[end - BLOCK_TOKENS : end])
        previous = hashlib.blake2b(previous + block, digest_size=16).digest()
        out.append(previous.hex())
    return out


def files_unchanged(files: list[str]) -> bool:
    """True while every file a state depends on ("path|size|mtime_ns") is still the same."""
    for item in files:
        path, _, rest = item.rpartition("|")
        path, _, size = path.rpartition("|")
        try:
            stat = os.stat(path)
        except OSError:
            return False
        if f"{stat.st_size}|{stat.st_mtime_ns}" != f"{size}|{rest}":
            return False
    return True


def file_identity(path: Path) -> str:
    """A model file's identity as files_unchanged reads it: resolved path, size and modification time."""
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


@dataclass
class PendingSave:
    """A state waiting for the store."""

    namespace: str
    tokens: list[int]
    state: SavedState
    parked: bool

    def extends(self, other: PendingSave) -> bool:
        """True when this state holds all of `other`'s tokens and more (the same conversation, later)."""
        return self.namespace == other.namespace and self.tokens[: len(other.tokens)] == other.tokens


class PromptSaver:
    """Hands states to the prompt cache on a thread of its own, so a batch loop never waits for the store. While the
    store is slower than the saves, a waiting save that a newer one extends gives way first (the store would replace
    it), then the oldest: at most MAX_PENDING_SAVES states wait in host memory (`dropped` counts the others)."""

    def __init__(self, store: PromptCache, model_id: str, files: list[str]) -> None:
        self.store, self.model_id, self.files = store, model_id, files
        self.dropped = 0
        self._pending: deque[PendingSave | None] = deque()
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"prompt-saver-{model_id}", daemon=True)
        self._thread.start()

    def save(
        self, namespace: str, tokens: list[int], state: SavedState, *, keep_all: bool = False, parked: bool = False
    ) -> None:
        """Queue one state (from any thread); `keep_all`: no other waiting one is dropped for it (a model leaving
        tier 1 saves all its slots; `parked`: as KV parking's)."""
        item = PendingSave(namespace, list(tokens), state, parked)
        with self._ready:
            kept = deque(p for p in self._pending if p is None or not item.extends(p))
            self.dropped += len(self._pending) - len(kept)
            while not keep_all and len(kept) >= MAX_PENDING_SAVES:
                kept.popleft()
                self.dropped += 1
            self._pending = kept
            self._pending.append(item)
            self._ready.notify()

    def close(self) -> None:
        """Hand over what is queued, then end the thread."""
        with self._ready:
            self._pending.append(None)
            self._ready.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._pending:
                    self._ready.wait()
                item = self._pending.popleft()
            if item is None:
                return
            try:
                self.store.save(self.model_id, item.namespace, item.tokens, item.state, self.files, item.parked)
            except Exception as error:  # the cache is an optimisation: a lost save costs a prefill later
                logger.warning("could not save a prompt state of %s: %s", self.model_id, error)
