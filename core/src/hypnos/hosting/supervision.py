"""What the server keeps of each engine host: its process figures, its crashes and how soon it may start again."""

from __future__ import annotations

import os
import signal
from collections import deque
from dataclasses import dataclass, field

import msgspec

from hypnos.config import ProcessConfig

BACKOFF_BASE_SECS = 0.5  # the wait before a restart doubles with each crash in the window, from this
BACKOFF_MAX_SECS = 30.0


class EngineProcessInfo(msgspec.Struct, kw_only=True):
    """`engine_process` of a model in /v1/memory/status: the host's pid, its measured memory, restarts, start time."""

    pid: int
    rss_bytes: int
    restarts: int
    started_at: float  # unix seconds
    vram_bytes: int | None = None  # what NVML reports for this process, on a GPU
    # seconds a request has made no progress, once that is a few seconds beyond the model's step time (else None)
    stalled_secs: float | None = None


def rss_bytes(pid: int) -> int:
    """The resident memory of a process (0 once it is gone), from /proc."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def exit_reason(returncode: int | None) -> str:
    """How a host ended, in words: `killed by SIGKILL`, `exited with status 3`."""
    if returncode is None:
        return "closed its connection"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


@dataclass(frozen=True)
class HostBlame:
    """Whom a host's exit falls on: `request_fault` when a request brought it down by its own fault (its client left
    and it did not stop, it ran past its bounds): no crash of the model; `owners`, the keys whose requests it served."""

    request_fault: bool = False
    owners: frozenset[str] = frozenset()


@dataclass
class CrashPolicy:
    """Failures (a model's host crashing, or its load failing) within a sliding window: the backoff before the next
    try, and when to stop trying."""

    max_crashes: int = 5
    window_secs: float = 600.0
    base_secs: float = BACKOFF_BASE_SECS  # the first wait; each further failure in the window doubles it
    max_secs: float = BACKOFF_MAX_SECS
    free_crashes: int = 1  # failures in the window tried again at once, before any wait
    crashes: deque[float] = field(default_factory=deque)
    restarts: int = 0  # hosts started after one died on its own
    # per key: when hosts ended with its requests in flight (its own faults and the model's crashes alike)
    by_key: dict[str, deque[float]] = field(default_factory=dict)

    @classmethod
    def of(cls, process: ProcessConfig) -> CrashPolicy:
        """The policy a model's [models.process] table sets."""
        return cls(max_crashes=process.max_crashes, window_secs=process.crash_window_secs)

    def record(self, now: float) -> None:
        """Count a crash at `now` (monotonic seconds)."""
        self.crashes.append(now)
        self._trim(now)

    def _trim(self, now: float) -> None:
        for times in (self.crashes, *self.by_key.values()):
            while times and now - times[0] > self.window_secs:
                times.popleft()

    def charge(self, owner: str, now: float) -> None:
        """Count a host's end against a key whose request was in flight."""
        self.by_key.setdefault(owner, deque()).append(now)
        self._trim(now)

    @property
    def key_limit(self) -> int:
        """Host ends within the window that get a key refused: one fewer than the model's quarantine needs."""
        return max(1, self.max_crashes - 1)

    def key_refused_secs(self, owner: str, now: float) -> float | None:
        """How long a key is still refused after its requests ended `key_limit` hosts in the window (None: not)."""
        self._trim(now)
        times = self.by_key.get(owner)
        if not times or len(times) < self.key_limit:
            return None
        return max(1.0, self.window_secs - (now - times[-self.key_limit]))

    def exhausted(self, now: float) -> bool:
        """True once max_crashes happened within the window: no more restarts until an admin enables the model."""
        self._trim(now)
        return len(self.crashes) >= self.max_crashes

    def backoff_secs(self, now: float) -> float:
        """How long to wait before the next start: nothing for the free crashes, then doubling per recent crash."""
        self._trim(now)
        if len(self.crashes) <= self.free_crashes:
            return 0.0
        since = now - self.crashes[-1]
        wait = min(self.max_secs, self.base_secs * 2.0 ** (len(self.crashes) - self.free_crashes - 1))
        return max(0.0, wait - since)

    def reset(self) -> None:
        """Forget the crashes (an admin enabled the model again, or it loaded)."""
        self.crashes.clear()
        self.by_key.clear()
