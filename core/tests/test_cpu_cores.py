"""The cores the scheduler shares out (affinity mask and cgroup quota) and the plan that splits them."""

from __future__ import annotations

from pathlib import Path

from hypnos.config import HardwareConfig
from hypnos.cpu_cores import CoreDemand, plan_cores, read_cpu_quota, usable_cores
from hypnos.hardware import SystemHardware


def test_the_affinity_mask_not_the_cpu_count_gives_the_cores() -> None:
    assert usable_cores(lambda: {5, 2, 3}, lambda: None) == [2, 3, 5]


def test_a_cgroup_quota_cuts_the_cores_to_its_whole_cores(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert read_cpu_quota(tmp_path) == 1.5
    assert usable_cores(lambda: [0, 1, 2, 3], lambda: read_cpu_quota(tmp_path)) == [0]
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert read_cpu_quota(tmp_path) is None
    assert usable_cores(lambda: [0, 1, 2, 3], lambda: read_cpu_quota(tmp_path)) == [0, 1, 2, 3]


def test_a_cgroup_v1_quota_is_read_too(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert read_cpu_quota(tmp_path) == 2.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert read_cpu_quota(tmp_path) is None


def test_the_machine_probe_reports_affinity_cut_to_the_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    probe = SystemHardware(HardwareConfig(simulate=True), cgroup_root=tmp_path, affinity=lambda: [1, 3, 4, 6])
    assert probe.cpu_cores() == [1, 3]


def test_concurrent_computations_get_disjoint_shares() -> None:
    shares = plan_cores([0, 1, 2, 3], [CoreDemand("a", order=0), CoreDemand("b", order=1)])
    assert shares == {"a": [0, 1], "b": [2, 3]}
    three = plan_cores(list(range(8)), [CoreDemand(name, order=i) for i, name in enumerate("xyz")])
    assert sorted(core for share in three.values() for core in share) == list(range(8))  # disjoint, all handed out
    assert [len(three[name]) for name in "xyz"] == [3, 3, 2]


def test_alone_a_computation_gets_every_core() -> None:
    assert plan_cores([0, 1], [CoreDemand("a")]) == {"a": [0, 1]}


def test_realtime_and_high_priority_come_first() -> None:
    demands = [CoreDemand("chat", rank=1, order=0), CoreDemand("voice", rank=3, order=1)]
    assert plan_cores([0, 1, 2], demands) == {"voice": [0, 1], "chat": [2]}


def test_a_share_is_capped_at_what_the_model_can_use() -> None:
    demands = [CoreDemand("small", rank=3, wants=1), CoreDemand("big", rank=1)]
    assert plan_cores([0, 1, 2, 3], demands) == {"small": [0], "big": [1, 2, 3]}


def test_a_pinned_model_keeps_its_cores() -> None:
    demands = [CoreDemand("pinned", rank=0, pinned=(3,)), CoreDemand("voice", rank=3), CoreDemand("chat", rank=1)]
    assert plan_cores([0, 1, 2, 3], demands) == {"pinned": [3], "voice": [0, 1], "chat": [2]}
    assert plan_cores([0, 1], [CoreDemand("p", pinned=(7, 1))]) == {"p": [1]}  # only the cores the machine has


def test_more_computations_than_cores_share_the_lowest_ranked_holders_core() -> None:
    demands = [CoreDemand("a", rank=3), CoreDemand("b", rank=2), CoreDemand("c", rank=1)]
    assert plan_cores([0, 1], demands) == {"a": [0], "b": [1], "c": [1]}


def test_a_yielding_batch_engine_takes_only_the_cores_the_others_leave() -> None:
    decode_and_documents = [CoreDemand("docs", order=0, yields=True), CoreDemand("chat", order=1)]
    assert plan_cores([0, 1], decode_and_documents) == {"chat": [0, 1], "docs": [1]}  # the decode keeps both cores
    capped = [CoreDemand("docs", order=0, yields=True), CoreDemand("chat", order=1, wants=1)]
    assert plan_cores([0, 1, 2], capped) == {"chat": [0], "docs": [1, 2]}  # what the chat cannot use is free
    assert plan_cores([0, 1], [CoreDemand("docs", yields=True)]) == {"docs": [0, 1]}  # alone: every core
