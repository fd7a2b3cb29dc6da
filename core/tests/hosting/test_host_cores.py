"""Engine hosts pinned to their model's core share while it computes."""

from __future__ import annotations

import asyncio
import os

import pytest
from host_kit import host_pid, hosted_model
from hypnos.types import Modality
from sched_kit import make_scheduler

TEXT = Modality.TEXT_GENERATION
CPUS = sorted(os.sched_getaffinity(0))


async def affinity_becomes(pid: int, wanted: set[int]) -> set[int]:
    """The host's affinity once it is `wanted` (or what it is after a few seconds)."""
    for _ in range(100):
        found = os.sched_getaffinity(pid)
        if found == wanted:
            break
        await asyncio.sleep(0.05)
    return found


@pytest.mark.skipif(len(CPUS) < 2, reason="disjoint shares need two CPUs")
async def test_hosts_of_concurrent_models_are_pinned_to_disjoint_shares() -> None:
    models = [hosted_model("a"), hosted_model("b")]
    scheduler = make_scheduler(models, server={"isolation": "process", "shutdown_grace_secs": 5.0}, cores=CPUS)
    half = len(CPUS) // 2
    try:
        async with scheduler.lease("a", TEXT):
            pid_a = host_pid(scheduler, "a")
            assert pid_a is not None
            assert await affinity_becomes(pid_a, set(CPUS)) == set(CPUS)
            async with scheduler.lease("b", TEXT):
                pid_b = host_pid(scheduler, "b")
                assert pid_b is not None
                assert await affinity_becomes(pid_a, set(CPUS[:half])) == set(CPUS[:half])
                assert await affinity_becomes(pid_b, set(CPUS[half:])) == set(CPUS[half:])
                # every thread of the host, not only its main one
                tids = [int(tid) for tid in os.listdir(f"/proc/{pid_b}/task")]
                assert all(os.sched_getaffinity(tid) == set(CPUS[half:]) for tid in tids)
            assert await affinity_becomes(pid_a, set(CPUS)) == set(CPUS)  # alone again: every core
    finally:
        await scheduler.shutdown()
