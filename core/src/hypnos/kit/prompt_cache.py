"""The prompt cache's keys and the engine side's saver: chain hashes of fixed-size token blocks under a namespace
(model file, context layout, isolation scope), and a thread that hands saved states to the store off the hot path."""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hypnos.engine import PromptCache

logger = logging.getLogger(__name__)

BLOCK_TOKENS = 64  # tokens per hashed block: a lookup walks len(prompt) / BLOCK_TOKENS hashes
MAX_PENDING_SAVES = 2  # states waiting for the store; past it the oldest is dropped (host memory stays bounded)


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


class PromptSaver:
    """Hands states to the prompt cache on a thread of its own, so a batch loop never waits for the store."""

    def __init__(self, store: PromptCache, model_id: str, files: list[str]) -> None:
        self.store, self.model_id, self.files = store, model_id, files
        self._queue: queue.Queue[tuple[str, list[int], bytes, bool] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"prompt-saver-{model_id}", daemon=True)
        self._thread.start()

    def save(
        self, namespace: str, tokens: list[int], state: bytes, *, keep_all: bool = False, parked: bool = False
    ) -> None:
        """Queue one state (from any thread); the oldest waiting one is dropped when MAX_PENDING_SAVES wait, unless
        `keep_all` (a model leaving tier 1 saves all its slots; `parked`: as KV parking's)."""
        while not keep_all and self._queue.qsize() >= MAX_PENDING_SAVES:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put((namespace, tokens, state, parked))

    def close(self) -> None:
        """Hand over what is queued, then end the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            namespace, tokens, state, parked = item
            try:
                self.store.save(self.model_id, namespace, tokens, state, self.files, parked)
            except Exception as error:  # the cache is an optimisation: a lost save costs a prefill later
                logger.warning("could not save a prompt state of %s: %s", self.model_id, error)
