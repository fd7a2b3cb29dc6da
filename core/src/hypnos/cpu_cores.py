"""The CPU cores this process may use (its affinity mask and cgroup CPU quota, not os.cpu_count()) and the plan that
shares them between the models computing at the same time."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


def read_affinity() -> list[int]:
    """The CPU ids this process may run on (its affinity mask); every CPU where the mask cannot be read."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def read_cpu_quota(root: str | Path = "/sys/fs/cgroup") -> float | None:
    """The cgroup's CPU quota in cores (v2 cpu.max, else v1 cpu.cfs_quota_us / cpu.cfs_period_us); None: unlimited."""
    base = Path(root)
    try:
        quota, _, period = (base / "cpu.max").read_text().strip().partition(" ")
        if quota == "max":
            return None
        return int(quota) / int(period or "100000")
    except (OSError, ValueError, ZeroDivisionError):
        pass
    for folder in (base / "cpu", base / "cpu,cpuacct", base):
        try:
            quota_us = int((folder / "cpu.cfs_quota_us").read_text())
            period_us = int((folder / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    return None


def usable_cores(
    affinity: Callable[[], Iterable[int]] = read_affinity,
    quota: Callable[[], float | None] = read_cpu_quota,
) -> list[int]:
    """The cores the scheduler shares out: the affinity mask, cut to the quota's whole cores (at least one)."""
    cores = sorted(set(affinity())) or [0]
    limit = quota()
    if limit is not None:
        cores = cores[: max(1, math.floor(limit + 1e-9))]
    return cores


@dataclass(frozen=True)
class CoreDemand:
    """A model computing now: its priority rank (higher first), when it began (earlier first), how many cores it can
    use (None: any number), the cores its config pins it to (empty: a share the plan chooses) and whether it yields
    (a batch engine whose host runs niced: it takes only the cores the others leave free)."""

    model_id: str
    rank: int = 0
    order: int = 0
    wants: int | None = None
    pinned: tuple[int, ...] = ()
    yields: bool = False


def plan_cores(cores: Sequence[int], demands: Sequence[CoreDemand]) -> dict[str, list[int]]:
    """Each computing model's share of `cores`: a pinned model keeps its configured cores (those the machine has),
    the others split the rest into disjoint shares, higher priority and earlier first, each capped at what it can
    use, then the yielding ones split what is left; only when there are more models than free cores do the last ones
    share a core (the lowest-ranked holder's: a niced batch engine beside a decode takes the crumbs the kernel leaves
    it on one core, not a core of its own)."""
    budget = list(dict.fromkeys(cores))
    shares: dict[str, list[int]] = {}
    taken: set[int] = set()
    for demand in demands:
        pinned = [core for core in demand.pinned if core in budget]
        if pinned:
            shares[demand.model_id] = pinned
            taken.update(pinned)
    free = [core for core in budget if core not in taken] or budget  # everything pinned: the rest share it all
    others = sorted(
        (d for d in demands if d.model_id not in shares), key=lambda d: (d.yields, -d.rank, d.order, d.model_id)
    )
    if not others:
        return shares
    firm = [d for d in others if not d.yields]
    sizes = _split(len(free), firm)
    sizes += _split(len(free) - sum(sizes), others[len(firm) :])
    start = 0
    for demand, size in zip(others, sizes, strict=True):
        if size:
            shares[demand.model_id] = free[start : start + size]
            start += size
    crowded = [d for d, size in zip(others, sizes, strict=True) if not size]
    for index, demand in enumerate(crowded):  # more models than cores: the lowest-ranked holders share theirs
        shares[demand.model_id] = [free[len(free) - 1 - index % len(free)]]
    return shares


def _split(count: int, demands: Sequence[CoreDemand]) -> list[int]:
    """How many of `count` cores each demand (in priority order) gets: an even split, the remainder to the first
    ones, each capped at what it wants, what the caps leave handed on in priority order."""
    sizes = [0] * len(demands)
    left = count
    for index in range(min(count, len(demands))):  # one core each while they last
        sizes[index] = 1
        left -= 1
    while left > 0:
        open_ = [i for i, d in enumerate(demands) if sizes[i] and (d.wants is None or sizes[i] < d.wants)]
        if not open_:
            break
        for index in open_:
            if left == 0:
                break
            sizes[index] += 1
            left -= 1
    return sizes


def pin_process(cores: Sequence[int], tasks: str | Path = "/proc/self/task") -> bool:
    """Pin every thread of this process to `cores` (threads started later inherit it); False where it cannot."""
    wanted = set(cores)
    try:
        tids = [int(entry.name) for entry in Path(tasks).iterdir()]
    except OSError:
        tids = [0]
    pinned = False
    for tid in tids:
        try:
            os.sched_setaffinity(tid, wanted)
            pinned = True
        except (AttributeError, OSError, ValueError):  # a thread that ended meanwhile, a CPU not ours, not Linux
            continue
    return pinned
