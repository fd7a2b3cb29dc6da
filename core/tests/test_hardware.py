"""Probing the machine: meminfo, cgroup limits, the simulated device without a GPU."""

from __future__ import annotations

from pathlib import Path

from hypnos.config import GiB, HardwareConfig, MiB
from hypnos.hardware import (
    StaticHardware,
    SystemHardware,
    default_simulated_vram,
    read_cgroup_limit,
    read_meminfo_total,
    read_process_rss,
)


def test_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683584 kB\nMemFree:        24019068 kB\n")
    assert read_meminfo_total(meminfo) == 24683584 * 1024
    assert read_meminfo_total(tmp_path / "missing") is None


def test_cgroup_v2_and_v1(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("max\n")
    assert read_cgroup_limit(tmp_path) is None
    (tmp_path / "memory.max").write_text("4294967296\n")
    assert read_cgroup_limit(tmp_path) == 4 * GiB
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert read_cgroup_limit(v1) is None
    (v1 / "memory" / "memory.limit_in_bytes").write_text("2147483648\n")
    assert read_cgroup_limit(v1) == 2 * GiB
    assert read_cgroup_limit(tmp_path / "nothing") is None


def test_default_simulated_vram() -> None:
    assert default_simulated_vram(64 * GiB) == 8 * GiB
    assert default_simulated_vram(16 * GiB) == 4 * GiB


def test_system_hardware_simulates_without_a_gpu(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16777216 kB\n")
    (tmp_path / "memory.max").write_text(str(8 * GiB))
    probe = SystemHardware(
        HardwareConfig(simulate=True, simulate_vram_bytes=512 * MiB), meminfo_path=meminfo, cgroup_root=tmp_path
    )
    info = probe.info()
    assert info.simulated and info.accelerator == "Cpu" and info.topology == "Simulated"
    assert "simulated" in info.device_name
    assert info.total_vram_bytes == 512 * MiB
    assert info.installed_memory_bytes == 16 * GiB
    assert info.physical_memory_bytes == 8 * GiB  # the cgroup limit
    assert probe.vram_free_bytes() is None
    assert probe.gpu_sample() is None
    assert probe.process_memory_bytes() > 0


def test_system_hardware_on_this_machine() -> None:
    probe = SystemHardware(HardwareConfig())
    info = probe.info()
    assert info.total_vram_bytes > 0
    if info.simulated:
        assert probe.gpu_sample() is None
    else:  # a real NVIDIA device
        sample = probe.gpu_sample()
        assert sample is not None and sample.sampled_unix_ms > 0
        assert probe.gpu_sample() is sample  # cached between samples
        free = probe.vram_free_bytes()
        assert free is not None and 0 < free <= info.total_vram_bytes


def test_static_hardware() -> None:
    probe = StaticHardware(vram_bytes=GiB, vram_free=GiB // 2, topology="DiscretePcie")
    assert not probe.info().simulated and probe.vram_free_bytes() == GiB // 2
    assert read_process_rss() > 0
