"""The CUDA paths, each run alone on the device (`python -m tools.gpu_check.paths NAME WORKDIR` prints one Row as
JSON): real Hypnos schedulers over the installed plugins, models written there (tiny, and one >= 2 GB GGUF)."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

from tools.gpu_check.paths_llama import demotion, kv_cache, moe, offload, oom_llama, promotion
from tools.gpu_check.paths_other import (
    ctranslate2_cuda,
    diffusers_offload,
    gliner_cuda,
    nvml,
    onnxruntime_cuda,
    oom_diffusers,
)
from tools.gpu_check.table import Row

CHECKS: dict[str, Callable[[Path], Awaitable[Row]]] = {
    "NVML vs nvidia-smi": nvml,
    "llama full offload": lambda work: offload(work, partial=False),
    "llama partial offload": lambda work: offload(work, partial=True),
    "MoE expert offload": moe,
    "tier 2 -> 1 promotion": promotion,
    "demotion": demotion,
    "KV parking on CUDA": lambda work: kv_cache(work, parking=True),
    "prompt cache on CUDA": lambda work: kv_cache(work, parking=False),
    "diffusers group offload": diffusers_offload,
    "GLiNER on torch CUDA": gliner_cuda,
    "ONNX Runtime CUDA provider": onnxruntime_cuda,
    "CTranslate2 (whisper) on CUDA": ctranslate2_cuda,
    "OOM: llama chat": lambda work: oom_llama(work, "chat"),
    "OOM: embeddings": lambda work: oom_llama(work, "embeddings"),
    "OOM: diffusers": oom_diffusers,
}
# the module each path imports first (a path whose module is missing is "not installed", not failed)
NEEDS = {
    "diffusers group offload": "hypnos_diffusion",
    "OOM: diffusers": "hypnos_diffusion",
    "GLiNER on torch CUDA": "hypnos_gliner",
    "ONNX Runtime CUDA provider": "onnxruntime",
    "CTranslate2 (whisper) on CUDA": "ctranslate2",
}


def main(argv: list[str]) -> int:
    """Run one path; its Row goes to stdout as the last line (JSON)."""
    name, work = argv[0], Path(argv[1])
    work.mkdir(parents=True, exist_ok=True)
    try:
        row = asyncio.run(CHECKS[name](work))
    except Exception as error:  # a failing path is a row, not a crash of the whole check
        row = Row(path=name, ran=True, passed=False, note=f"{type(error).__name__}: {str(error)[:160]}")
    print(msgspec.json.encode(row).decode())
    shutil.rmtree(work / "scratch", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
