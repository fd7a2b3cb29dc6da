"""What the machine has: the accelerator (NVML when a GPU is there), RAM from /proc/meminfo and cgroups, GPU samples."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import msgspec

from hypnos.config import GiB, HardwareConfig
from hypnos.cpu_cores import read_affinity, read_cpu_quota, usable_cores

logger = logging.getLogger(__name__)

GPU_SAMPLE_INTERVAL_S = 3.0
VRAM_FREE_INTERVAL_S = 1.0
_NO_LIMIT = 1 << 60  # cgroup v1 reports "no limit" as a huge number


class DeviceInfo(msgspec.Struct, kw_only=True, frozen=True):
    """The accelerator and memory this process may use, probed once."""

    accelerator: str
    topology: str
    device_name: str
    total_vram_bytes: int
    simulated: bool
    installed_memory_bytes: int
    physical_memory_bytes: int

    @property
    def discrete(self) -> bool:
        """True for a discrete GPU (or the simulated pool, which behaves like one)."""
        return self.topology in ("DiscretePcie", "Simulated")


class GpuSample(msgspec.Struct, kw_only=True):
    """The `gpu` block of /v1/memory/status, sampled at most every few seconds."""

    utilization_percent: int | None = None
    temperature_celsius: int | None = None
    power_watts: float | None = None
    sm_clock_mhz: int | None = None
    throttle_reasons: int = 0
    throttled: bool = False
    ecc_uncorrected_errors: int = 0
    retired_pages_pending: bool = False
    sampled_unix_ms: int = 0


class HardwareProbe(Protocol):
    """What the scheduler asks the machine: fixed facts, free VRAM, GPU samples, the process's footprint."""

    def info(self) -> DeviceInfo:
        """The device facts (cheap, cached)."""
        ...

    def vram_free_bytes(self) -> int | None:
        """Free VRAM as the device reports it; None when simulated."""
        ...

    def gpu_sample(self) -> GpuSample | None:
        """The latest GPU sample, None without an NVIDIA device."""
        ...

    def process_memory_bytes(self) -> int:
        """The resident set of this process."""
        ...

    def cpu_cores(self) -> list[int]:
        """The CPU ids the scheduler shares out (affinity mask cut to the cgroup quota), probed once."""
        ...


def read_meminfo_total(path: str | Path = "/proc/meminfo") -> int | None:
    """MemTotal in bytes, or None when the file is missing or unreadable."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def read_cgroup_limit(root: str | Path = "/sys/fs/cgroup") -> int | None:
    """The cgroup memory limit (v2 memory.max, else v1 memory.limit_in_bytes); None when unlimited or absent."""
    base = Path(root)
    for candidate in (base / "memory.max", base / "memory" / "memory.limit_in_bytes"):
        try:
            text = candidate.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return None if value >= _NO_LIMIT else value
    return None


def read_process_rss(path: str | Path = "/proc/self/status") -> int:
    """VmRSS of this process in bytes (0 when unknown)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def nvml_process_vram(pid: int, device: int = 0) -> int | None:
    """The device memory NVML reports for one process (0 when it holds none); None without NVML or a GPU."""
    try:
        import pynvml  # optional dependency (hypnos-core[gpu])

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device)
        processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:
        return None
    return sum(int(p.usedGpuMemory or 0) for p in processes if p.pid == pid)


def cpu_name(path: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name, for naming the simulated accelerator."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return os.uname().machine or "cpu"


def default_simulated_vram(ram_bytes: int) -> int:
    """The automatic simulated tier-1 size: a quarter of the RAM, at most 8 GiB."""
    return max(256 * 1024 * 1024, min(8 * GiB, ram_bytes // 4))


class _Nvml:
    """A thin wrapper over pynvml (imported lazily) for device 0."""

    def __init__(self) -> None:
        import pynvml  # optional dependency, imported only when probing

        pynvml.nvmlInit()
        self.lib: Any = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def name(self) -> str:
        name = self.lib.nvmlDeviceGetName(self.handle)
        return name.decode() if isinstance(name, bytes) else str(name)

    def memory(self) -> tuple[int, int]:
        info = self.lib.nvmlDeviceGetMemoryInfo(self.handle)
        return int(info.total), int(info.free)

    def _try(self, call: Callable[[], Any], default: Any) -> Any:
        try:
            return call()
        except Exception:
            return default

    def sample(self) -> GpuSample:
        lib, h = self.lib, self.handle
        util = self._try(lambda: int(lib.nvmlDeviceGetUtilizationRates(h).gpu), None)
        temp = self._try(lambda: int(lib.nvmlDeviceGetTemperature(h, lib.NVML_TEMPERATURE_GPU)), None)
        power = self._try(lambda: round(lib.nvmlDeviceGetPowerUsage(h) / 1000.0, 1), None)
        clock = self._try(lambda: int(lib.nvmlDeviceGetClockInfo(h, lib.NVML_CLOCK_SM)), None)
        reasons = self._try(lambda: int(lib.nvmlDeviceGetCurrentClocksThrottleReasons(h)), 0)
        ecc = self._try(
            lambda: int(
                lib.nvmlDeviceGetTotalEccErrors(h, lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, lib.NVML_VOLATILE_ECC)
            ),
            0,
        )
        pending = self._try(lambda: bool(lib.nvmlDeviceGetRetiredPagesPendingStatus(h)), False)
        idle_only = 0x1  # nvmlClocksThrottleReasonGpuIdle: not a throttle worth reporting
        return GpuSample(
            utilization_percent=util,
            temperature_celsius=temp,
            power_watts=power,
            sm_clock_mhz=clock,
            throttle_reasons=reasons,
            throttled=bool(reasons & ~idle_only),
            ecc_uncorrected_errors=ecc,
            retired_pages_pending=pending,
            sampled_unix_ms=int(time.time() * 1000),
        )


class SystemHardware:
    """The real machine: NVML for the GPU when present, else a simulated tier 1 computing on the CPU."""

    def __init__(
        self,
        config: HardwareConfig,
        *,
        meminfo_path: str | Path = "/proc/meminfo",
        cgroup_root: str | Path = "/sys/fs/cgroup",
        clock: Callable[[], float] = time.monotonic,
        affinity: Callable[[], Iterable[int]] = read_affinity,
    ) -> None:
        self._clock = clock
        self._cores = usable_cores(affinity, lambda: read_cpu_quota(cgroup_root))
        self._nvml: _Nvml | None = None
        self._sample: GpuSample | None = None
        self._sampled_at = -1e18
        self._free: int | None = None
        self._free_at = -1e18
        installed = read_meminfo_total(meminfo_path) or 8 * GiB
        limit = read_cgroup_limit(cgroup_root)
        physical = min(installed, limit) if limit else installed
        if not config.simulate:
            try:
                self._nvml = _Nvml()
            except Exception as error:  # no driver, no library: simulate
                logger.info("no NVIDIA GPU (%s); simulating tier 1", error)
                self._nvml = None
        if self._nvml is not None:
            total, _ = self._nvml.memory()
            self._info = DeviceInfo(
                accelerator="NvidiaCuda",
                topology="DiscretePcie",
                device_name=self._nvml.name(),
                total_vram_bytes=total,
                simulated=False,
                installed_memory_bytes=installed,
                physical_memory_bytes=physical,
            )
        else:
            vram = config.simulate_vram_bytes or default_simulated_vram(physical)
            self._info = DeviceInfo(
                accelerator="Cpu",
                topology="Simulated",
                device_name=f"{cpu_name()} (simulated tier 1)",
                total_vram_bytes=vram,
                simulated=True,
                installed_memory_bytes=installed,
                physical_memory_bytes=physical,
            )

    def info(self) -> DeviceInfo:
        """The device facts probed at construction."""
        return self._info

    def vram_free_bytes(self) -> int | None:
        """Device-reported free VRAM, cached about a second; None when simulated."""
        if self._nvml is None:
            return None
        now = self._clock()
        if now - self._free_at >= VRAM_FREE_INTERVAL_S:
            try:
                self._free = self._nvml.memory()[1]
            except Exception:
                logger.warning("reading free VRAM failed", exc_info=True)
            self._free_at = now
        return self._free

    def gpu_sample(self) -> GpuSample | None:
        """The GPU block, re-sampled at most every GPU_SAMPLE_INTERVAL_S seconds."""
        if self._nvml is None:
            return None
        now = self._clock()
        if self._sample is None or now - self._sampled_at >= GPU_SAMPLE_INTERVAL_S:
            self._sample = self._nvml.sample()
            self._sampled_at = now
        return self._sample

    def process_memory_bytes(self) -> int:
        """The process's resident set from /proc/self/status."""
        return read_process_rss()

    def cpu_cores(self) -> list[int]:
        """The affinity mask's CPUs, as many as the cgroup's CPU quota allows (read at construction)."""
        return list(self._cores)


class StaticHardware:
    """Fixed figures for tests and benchmarks: a simulated device unless `vram_free` is given."""

    def __init__(
        self,
        *,
        vram_bytes: int = 8 * GiB,
        ram_bytes: int = 32 * GiB,
        vram_free: int | None = None,
        topology: str = "Simulated",
        gpu: GpuSample | None = None,
        cores: Iterable[int] = (0, 1, 2, 3),
    ) -> None:
        self.cores = list(cores)
        simulated = vram_free is None and topology == "Simulated"
        self._info = DeviceInfo(
            accelerator="Cpu" if simulated else "NvidiaCuda",
            topology=topology,
            device_name="static test device",
            total_vram_bytes=vram_bytes,
            simulated=simulated,
            installed_memory_bytes=ram_bytes,
            physical_memory_bytes=ram_bytes,
        )
        self.vram_free = vram_free
        self.gpu = gpu
        self.rss = 0

    def info(self) -> DeviceInfo:
        """The fixed device facts."""
        return self._info

    def vram_free_bytes(self) -> int | None:
        """The configured free VRAM (None: simulated)."""
        return self.vram_free

    def gpu_sample(self) -> GpuSample | None:
        """The configured GPU sample."""
        return self.gpu

    def process_memory_bytes(self) -> int:
        """The configured resident set."""
        return self.rss

    def cpu_cores(self) -> list[int]:
        """The configured CPU ids."""
        return list(self.cores)
