"""The prompt cache (section 14): saved prompt states (a sequence's KV for a token prefix) of every model in host RAM
and on disk, found by the longest block prefix of a new prompt.

Tier 1 is the engines' slots. Tier 2 is host RAM: its bytes count in the tier-2 budget and the process cap beside
the parked KV (the KV park store adds them), each model's under its `[models.prompt_cache] ram_bytes`, and the planner
releases them before it evicts a model. Tier 3 is disk under server.data_dir, each model's under `disk_bytes`: every
saved state is written there too (off the caller's thread), so a state dropped from RAM is still on disk, and the
disk tier survives an engine host's crash and a restart (indexed at start; a file whose model file changed, or that
is torn or foreign, is dropped with a log line). Least recently used entries go first in each tier.

KV parking is a special case: a model leaving tier 1 saves its idle slots as parked entries, held in RAM under the
KV park cap (hardware.kv_park) instead of the model's ram_bytes, until the model is back in tier 1 (`unpark`); they
are found by prefix like any other entry, and written to disk like them when the model's cache is on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypnos.config import PromptCacheConfig
from hypnos.engine import CachedPrompt, SavedState
from hypnos.kit.prompt_cache import BLOCK_TOKENS, block_hashes, common_prefix, files_unchanged
from hypnos.scheduler.prompt_files import (
    SUFFIX,
    CacheFileError,
    FileHeader,
    drop_file,
    model_folder,
    read_state,
    saved_files,
    write_entry,
)
from hypnos.scheduler.status_types import PromptCacheModel, PromptCacheStatus

logger = logging.getLogger(__name__)
TIERS = ("slots", "ram", "disk")


@dataclass
class ParkedStates:
    """One model's parked states: when the oldest was parked, how many, their tokens and bytes."""

    model: str
    parked_at: float
    slots: int = 0
    tokens: int = 0
    bytes: int = 0


@dataclass
class Entry:
    """One saved prompt state: its tokens and block hashes, its bytes in RAM (None when only on disk), its file."""

    model: str
    namespace: str
    tokens: list[int]
    hashes: list[str]
    files: list[str]
    size: int
    state: SavedState | None = None
    path: Path | None = None
    disk_bytes: int = 0
    writing: bool = False  # its disk write is queued or running (a RAM copy dropped meanwhile is not lost)
    used: float = field(default_factory=time.monotonic)
    parked: float | None = None  # when KV parking saved it (its model left tier 1); None: an ordinary entry

    @property
    def key(self) -> tuple[str, str]:
        """The index key: namespace and last block hash."""
        return self.namespace, self.hashes[-1]


class PromptCacheStore:
    """The contract's PromptCache for every model under its caps and the host budgets (thread-safe)."""

    def __init__(self, folder: Path | None, configs: Callable[[str], PromptCacheConfig | None]) -> None:
        self.folder = folder
        self._configs = configs
        self._room: Callable[[], int] | None = None
        self._parking: Callable[[], int] | None = None  # the bytes parked entries may hold (0: parking is off)
        self._clock: Callable[[], float] = time.monotonic
        self.lock = threading.RLock()
        self._entries: dict[tuple[str, str], Entry] = {}
        self._index: dict[tuple[str, str], set[tuple[str, str]]] = {}  # (namespace, block hash) -> entries
        self.hits = dict.fromkeys(TIERS, 0)
        self.misses = 0
        self._writes: queue.Queue[tuple[Entry, SavedState] | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        if folder is not None:
            self._index_disk(folder)

    def bind_room(self, room: Callable[[], int]) -> None:
        """Where the host bytes left for saved states come from (the budgets less models and parked KV)."""
        self._room = room

    def bind_parking(self, room: Callable[[], int], clock: Callable[[], float]) -> None:
        """Where the bytes parked entries may hold come from (KV parking's cap and budgets), and its clock."""
        self._parking, self._clock = room, clock

    # ---- the engines' side -------------------------------------------------------------------------------------

    def save(
        self,
        model_id: str,
        namespace: str,
        tokens: list[int],
        state: SavedState,
        files: list[str],
        parked: bool = False,
    ) -> bool:
        """Keep a state for `tokens` (at least one full block) in RAM and write it to disk; False when off or it
        cannot fit. An entry whose tokens this one extends is replaced by it. `parked`: KV parking's (kept under
        its cap while parking is on, even when the model's cache is off; else an ordinary save)."""
        config = self._configs(model_id)
        hashes = block_hashes(namespace, tokens)
        if config is None or not hashes or not state or not (config.enabled or parked):
            return False
        entry = Entry(model_id, namespace, list(tokens), hashes, list(files), len(state), state=state)
        entry.writing = to_disk = config.enabled and self.folder is not None and config.disk_bytes >= entry.size
        with self.lock:
            if parked and self._park_room(model_id, entry.size):
                entry.parked = self._clock()
            elif not config.enabled:
                return False
            for old in [self._entries.get((namespace, h)) for h in hashes]:
                if old is not None and old.tokens == entry.tokens[: len(old.tokens)]:
                    self._remove(old)
            if (same := self._entries.get(entry.key)) is not None:
                self._remove(same)
            self._add(entry)
            self._fit_ram(model_id)
            kept = entry.state is not None
        if to_disk:
            self._queue_write(entry, state)
            kept = True
        return kept

    def lookup(self, model_id: str, namespace: str, tokens: list[int], longer_than: int) -> CachedPrompt | None:
        """The entry sharing the longest block prefix with `tokens`, when longer than `longer_than` (a slot's)."""
        hashes = block_hashes(namespace, tokens)
        with self.lock:
            entry = None
            for depth in range(len(hashes), 0, -1):
                if (depth + 1) * BLOCK_TOKENS <= longer_than:
                    break  # no entry this short can beat what the slot holds
                keys = self._index.get((namespace, hashes[depth - 1]))
                if keys:
                    entry = max((self._entries[k] for k in keys), key=lambda e: e.used)
                    break
            if entry is None or common_prefix(entry.tokens, tokens) <= longer_than:
                self._count(None, longer_than)
                return None
            entry.used = time.monotonic()
            state, path, writing = entry.state, entry.path, entry.writing
        if state is None and path is None and writing:  # spilled while its file is being written: wait for it
            self.flush()
            path = entry.path
        tier = "ram"
        if state is None and path is not None:
            tier = "disk"
            try:
                state = read_state(path, model_id, namespace)
            except (OSError, CacheFileError) as error:
                drop_file(path, str(error))
                with self.lock:
                    self._remove(entry)
                    self._count(None, longer_than)
                return None
        if state is None:
            return None
        with self.lock:
            self._count(tier, longer_than)
        return CachedPrompt(tokens=list(entry.tokens), state=state, tier=tier)

    # ---- the scheduler's side ----------------------------------------------------------------------------------

    @property
    def ram_bytes(self) -> int:
        """Host bytes the saved states hold now (parked ones included)."""
        with self.lock:
            return sum(e.size for e in self._entries.values() if e.state is not None)

    @property
    def parked_bytes(self) -> int:
        """Host bytes the parked states hold now."""
        with self.lock:
            return sum(e.size for e in self._parked())

    def release_ram(self, num_bytes: int) -> int:
        """Drop RAM copies of unparked states, least recently used first, until `num_bytes` are freed (disk copies
        stay); the bytes."""
        freed = 0
        with self.lock:
            for entry in sorted(self._in_ram(), key=lambda e: e.used):
                if freed >= num_bytes:
                    break
                freed += self._drop_ram(entry)
        return freed

    def parked_models(self) -> list[ParkedStates]:
        """Each model's parked states (KV parking's status and its oldest-first order)."""
        with self.lock:
            models: dict[str, ParkedStates] = {}
            for entry in self._parked():
                assert entry.parked is not None
                held = models.setdefault(entry.model, ParkedStates(entry.model, entry.parked))
                held.slots += 1
                held.tokens += len(entry.tokens)
                held.bytes += entry.size
                held.parked_at = min(held.parked_at, entry.parked)
            return sorted(models.values(), key=lambda m: m.parked_at)

    def release_parked(self, model_id: str) -> int:
        """Drop the RAM copies of a model's parked states (those on disk stay there, unparked); the bytes freed."""
        with self.lock:
            freed = 0
            for entry in [e for e in self._parked() if e.model == model_id]:
                entry.parked = None
                freed += self._drop_ram(entry)
            return freed

    def unpark(self, model_id: str) -> None:
        """The model is back in tier 1: its parked states become ordinary ones (its RAM cap, least recently used)."""
        with self.lock:
            for entry in self._parked():
                if entry.model == model_id:
                    entry.parked = None
            self._fit_ram(model_id)

    def drop(self, model_id: str) -> None:
        """Forget a model's saved states, in RAM and on disk (a deleted or disabled model)."""
        with self.lock:
            for entry in [e for e in self._entries.values() if e.model == model_id]:
                self._remove(entry, delete=True)

    def flush(self) -> None:
        """Wait until the queued disk writes are done (tests, shutdown)."""
        if self._writer is not None:
            self._writes.join()

    def status(self) -> PromptCacheStatus:
        """The prompt_cache object of /v1/memory/status."""
        with self.lock:
            models: dict[str, PromptCacheModel] = {}
            for entry in self._entries.values():
                model = models.setdefault(entry.model, PromptCacheModel(model=entry.model))
                model.entries += 1
                model.ram_bytes += entry.size if entry.state is not None else 0
                model.disk_bytes += entry.disk_bytes
            listed = sorted(models.values(), key=lambda m: m.model)
            return PromptCacheStatus(
                ram_bytes=sum(m.ram_bytes for m in listed),
                disk_bytes=sum(m.disk_bytes for m in listed),
                hits=dict(self.hits),
                misses=self.misses,
                models=listed,
            )

    # ---- inside (lock held) --------------------------------------------------------------------------------------

    def _count(self, tier: str | None, longer_than: int) -> None:
        if tier is not None:
            self.hits[tier] += 1
        elif longer_than > 0:
            self.hits["slots"] += 1
        else:
            self.misses += 1

    def _park_room(self, model_id: str, size: int) -> bool:
        """Whether a parked state of `size` bytes fits KV parking's room, other models' older ones giving way."""
        room = self._parking() if self._parking is not None else 0
        if size > room:
            return False
        for held in self.parked_models():  # the least recently parked first
            if self.parked_bytes + size <= room:
                break
            if held.model != model_id:
                self.release_parked(held.model)
        return self.parked_bytes + size <= room

    def _in_ram(self, model_id: str | None = None) -> list[Entry]:
        """Unparked entries holding RAM (of one model, or all)."""
        return [
            e
            for e in self._entries.values()
            if e.state is not None and e.parked is None and model_id in (None, e.model)
        ]

    def _parked(self) -> list[Entry]:
        return [e for e in self._entries.values() if e.parked is not None and e.state is not None]

    def _add(self, entry: Entry) -> None:
        self._entries[entry.key] = entry
        for block in entry.hashes:
            self._index.setdefault((entry.namespace, block), set()).add(entry.key)

    def _remove(self, entry: Entry, *, delete: bool = True) -> None:
        if self._entries.get(entry.key) is not entry:
            return
        del self._entries[entry.key]
        for block in entry.hashes:
            keys = self._index.get((entry.namespace, block))
            if keys is not None:
                keys.discard(entry.key)
                if not keys:
                    del self._index[(entry.namespace, block)]
        entry.state = None
        if delete and entry.path is not None:
            entry.path.unlink(missing_ok=True)
            entry.path, entry.disk_bytes = None, 0

    def _drop_ram(self, entry: Entry) -> int:
        """Drop an entry's RAM copy (spilled: its file, or its queued write, keeps it); the bytes freed."""
        freed = entry.size
        entry.state, entry.parked = None, None
        if entry.path is None and not entry.writing:
            self._remove(entry)
        return freed

    def _fit_ram(self, model_id: str) -> None:
        """Drop RAM copies, least recently used first, past the model's cap or the room the budgets leave."""
        config = self._configs(model_id)
        cap = config.ram_bytes if config is not None else 0
        mine = sorted(self._in_ram(model_id), key=lambda e: e.used)
        held = sum(e.size for e in mine)
        for entry in mine:
            if held <= cap:
                break
            held -= self._drop_ram(entry)
        if self._room is not None:
            over = sum(e.size for e in self._entries.values() if e.state is not None) - self._room()
            if over > 0:
                self.release_ram(over)

    def _fit_disk(self, model_id: str) -> None:
        config = self._configs(model_id)
        cap = config.disk_bytes if config is not None else 0
        mine = sorted((e for e in self._entries.values() if e.model == model_id and e.path), key=lambda e: e.used)
        held = sum(e.disk_bytes for e in mine)
        for entry in mine:
            if held <= cap:
                break
            held -= entry.disk_bytes
            assert entry.path is not None
            entry.path.unlink(missing_ok=True)
            entry.path, entry.disk_bytes = None, 0
            if entry.state is None:
                self._remove(entry)

    # ---- the disk tier ---------------------------------------------------------------------------------------

    def _queue_write(self, entry: Entry, state: SavedState) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="prompt-cache-writer", daemon=True)
            self._writer.start()
        self._writes.put((entry, state))

    def _write_loop(self) -> None:
        while True:
            item = self._writes.get()
            try:
                if item is not None:
                    self._write(*item)
            except Exception as error:  # a failed write costs a prefill later, never a request
                logger.warning("could not write a prompt cache file: %s", error)
            finally:
                if item is not None:
                    with self.lock:
                        item[0].writing = False
                        if item[0].state is None and item[0].path is None:
                            self._remove(item[0])  # spilled while its write failed
                self._writes.task_done()

    def _write(self, entry: Entry, state: SavedState) -> None:
        with self.lock:
            if self._entries.get(entry.key) is not entry:
                return  # replaced or dropped while queued
        assert self.folder is not None
        path = model_folder(self.folder, entry.model) / f"{entry.namespace[:16]}-{entry.hashes[-1]}{SUFFIX}"
        header = FileHeader(entry.model, entry.namespace, entry.tokens, entry.hashes, entry.files, len(state))
        size = write_entry(path, header, state)
        with self.lock:
            if self._entries.get(entry.key) is not entry:
                path.unlink(missing_ok=True)
                return
            entry.path, entry.disk_bytes = path, size
            self._fit_disk(entry.model)

    def _index_disk(self, folder: Path) -> None:
        """Index the files a previous run left (prompt_files.saved_files drops those it cannot trust)."""
        for path, header in saved_files(folder, files_unchanged):
            stat = path.stat()
            entry = Entry(
                header.model,
                header.namespace,
                header.tokens,
                header.hashes,
                header.files,
                header.state_len,
                path=path,
                disk_bytes=stat.st_size,
                used=time.monotonic() - max(0.0, time.time() - stat.st_mtime),
            )
            self._add(entry)
        if self._entries:
            logger.info("prompt cache: %d saved prompt states on disk", len(self._entries))
