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


class _FakeNvml:
    """Just enough of pynvml for SystemHardware: device 0 with 24 GiB, 20 GiB free, a throttled clock."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self) -> None:
        self.free = 20 * GiB
        self.memory_reads = 0
        self.samples = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return b"NVIDIA Fake 24G"

    def nvmlDeviceGetMemoryInfo(self, handle: str):
        self.memory_reads += 1
        return type("Memory", (), {"total": 24 * GiB, "free": self.free})()

    def nvmlDeviceGetUtilizationRates(self, handle: str):
        self.samples += 1
        return type("Util", (), {"gpu": 87})()

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 71

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 148200

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        return 2400

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
        return 0x4  # a power cap

    def nvmlDeviceGetTotalEccErrors(self, handle: str, kind: int, counter: int) -> int:
        raise RuntimeError("ECC not supported")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: str) -> int:
        return 0


def test_system_hardware_with_an_nvidia_device(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import sys

    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    now = [100.0]
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       67108864 kB\n")
    probe = SystemHardware(HardwareConfig(), meminfo_path=meminfo, cgroup_root=tmp_path, clock=lambda: now[0])
    info = probe.info()
    assert not info.simulated and info.accelerator == "NvidiaCuda" and info.topology == "DiscretePcie"
    assert info.device_name == "NVIDIA Fake 24G" and info.total_vram_bytes == 24 * GiB
    assert probe.vram_free_bytes() == 20 * GiB
    fake.free = 10 * GiB
    assert probe.vram_free_bytes() == 20 * GiB  # cached for about a second
    now[0] += 1.5
    assert probe.vram_free_bytes() == 10 * GiB
    sample = probe.gpu_sample()
    assert sample is not None
    assert (sample.utilization_percent, sample.temperature_celsius, sample.power_watts) == (87, 71, 148.2)
    assert sample.sm_clock_mhz == 2400 and sample.throttle_reasons == 4 and sample.throttled
    assert sample.ecc_uncorrected_errors == 0 and sample.retired_pages_pending is False
    assert probe.gpu_sample() is sample and fake.samples == 1  # sampled at most every few seconds
    now[0] += 5
    assert probe.gpu_sample() is not sample and fake.samples == 2
    # the simulate switch wins over a present device
    assert SystemHardware(HardwareConfig(simulate=True), meminfo_path=meminfo, cgroup_root=tmp_path).info().simulated


def test_status_shows_the_gpu_block_and_unaccounted_vram() -> None:
    from hypnos.config import settings_from_mapping
    from hypnos.hardware import GpuSample
    from hypnos.scheduler import Scheduler

    gpu = GpuSample(utilization_percent=50, sampled_unix_ms=1)
    probe = StaticHardware(vram_bytes=24 * GiB, vram_free=20 * GiB, topology="DiscretePcie", gpu=gpu)
    scheduler = Scheduler(settings_from_mapping({}), {}, hardware=probe)
    status = scheduler.status()
    assert status.gpu == gpu and not status.capabilities.simulated
    assert status.tier1_vram_real_free_bytes == 20 * GiB
    assert status.tier1_vram_unaccounted_bytes == 4 * GiB  # used on the device, booked by nobody
    assert status.tier1_vram_effective_free_bytes == 24 * GiB - 512 * MiB - 4 * GiB
