"""What the GPU paths share: nvidia-smi and NVML figures, a scheduler over the installed plugins, a VRAM hog."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

MiB = 1 << 20


def nvidia_smi(query: str, *, apps: bool = False) -> list[list[str]]:
    """nvidia-smi's CSV rows for a --query-gpu (or --query-compute-apps) field list."""
    flag = "--query-compute-apps" if apps else "--query-gpu"
    out = subprocess.run(
        ["nvidia-smi", f"{flag}={query}", "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True
    ).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines() if line.strip()]


def nvml_process_bytes(pid: int) -> int:
    """VRAM NVML reports for one process on device 0 (0 when it holds none)."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if proc.pid == pid:
            return int(proc.usedGpuMemory or 0)
    return 0


def llama_scheduler(work: Path, models: list[dict[str, Any]], hardware: dict[str, Any] | None = None) -> Any:
    """A scheduler on the real device (NVML) over the installed plugins, engines in their own hosts."""
    from hypnos.config import settings_from_mapping
    from hypnos.plugins import collect_engine_kinds, make_plugin_manager
    from hypnos.scheduler import Scheduler

    raw = {"server": {"isolation": "process"}, "hardware": hardware or {}, "models": models, "models_dir": str(work)}
    return Scheduler(settings_from_mapping(raw), collect_engine_kinds(make_plugin_manager()))


def gguf_model(model_id: str, path: Path, **extra: Any) -> dict[str, Any]:
    """A [[models]] entry for a GGUF chat model."""
    return {
        "id": model_id,
        "modality": "text_generation",
        "engine": "ggml_llama",
        "weights_path": str(path),
        "context_len": 4096,
        **extra,
    }


def hog_vram(leave_bytes: int) -> Any:
    """Fill the device with torch allocations until `leave_bytes` are free; returns them (freed when dropped)."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    return torch.empty(max(0, free - leave_bytes), dtype=torch.uint8, device="cuda")


async def drain(events: Any) -> None:
    """Read a stream to its end."""
    async for _ in events:
        pass
