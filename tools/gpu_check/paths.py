"""The CUDA paths, each run alone on the device (`python -m tools.gpu_check.paths NAME WORKDIR` prints one Row as
JSON): real Hypnos schedulers over the installed plugins, models written here (tiny, and one >= 2 GB GGUF)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from tools.gpu_check.table import Row, agreement_row, ratio_row

MiB = 1 << 20
BIG_LAYERS, BIG_DIM, BIG_FF = 10, 4096, 11008  # ~2.2 GB of f16 weights


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


def write_big_gguf(
    path: Path, layers: int = BIG_LAYERS, experts: int = 0, dim: int = BIG_DIM, ff: int = BIG_FF
) -> Path:
    """A random llama GGUF in f16 (no quantizing: fast to write), the tiny model's vocabulary and template."""
    import gguf
    import numpy as np
    from hypnos_llama import testing

    if path.exists():
        return path
    tiny = path.with_suffix(".tiny.gguf")
    testing.write_tiny_llama(tiny, layers=1, dim=64, heads=4, kv_heads=2, ff=128)
    reader = gguf.GGUFReader(str(tiny))
    vocab = [
        bytes(reader.fields["tokenizer.ggml.tokens"].parts[i]).decode()
        for i in reader.fields["tokenizer.ggml.tokens"].data
    ]
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    heads, kv_heads = 32, 8
    for key, value in (("block_count", layers), ("context_length", 8192), ("embedding_length", dim)):
        writer.add_uint32(f"llama.{key}", value)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(dim // heads)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(2)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab)
    writer.add_token_scores([0.0] * len(vocab))
    writer.add_token_types(
        [gguf.TokenType.CONTROL] * 5 + [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (len(vocab) - 261)
    )
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(4)
    writer.add_chat_template(testing.CHATML_TEMPLATE)

    def weight(*shape: int) -> Any:
        return (rng.random(shape, dtype=np.float32) * 0.02 - 0.01).astype(np.float16)

    kv_dim = dim // heads * kv_heads
    writer.add_tensor("token_embd.weight", weight(len(vocab), dim))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(dim, dtype=np.float32))
        for name, shape in (
            ("attn_q", (dim, dim)),
            ("attn_k", (kv_dim, dim)),
            ("attn_v", (kv_dim, dim)),
            ("attn_output", (dim, dim)),
        ):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(*shape))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(dim, dtype=np.float32))
        if experts:
            writer.add_tensor(f"blk.{i}.ffn_gate_inp.weight", weight(experts, dim).astype(np.float32))
            for name, shape in (("gate", (experts, ff, dim)), ("up", (experts, ff, dim)), ("down", (experts, dim, ff))):
                writer.add_tensor(f"blk.{i}.ffn_{name}_exps.weight", weight(*shape))
        else:
            for name, shape in (("gate", (ff, dim)), ("up", (ff, dim)), ("down", (dim, ff))):
                writer.add_tensor(f"blk.{i}.ffn_{name}.weight", weight(*shape))
    writer.add_tensor("output_norm.weight", np.ones(dim, dtype=np.float32))
    writer.add_tensor("output.weight", weight(len(vocab), dim))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


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


async def chat_timing(scheduler: Any, model_id: str, text: str = "the capital of France is", tokens: int = 64) -> Any:
    """Run one chat through a lease; returns its EngineTiming."""
    from hypnos.types import Modality
    from hypnos_llama.testing import chat_request

    timing = None
    async with scheduler.lease(model_id, Modality.TEXT_GENERATION) as lease:
        async for event in lease.engine.chat(chat_request(text, max_tokens=tokens), lease.cancel):
            timing = getattr(event, "timing", timing)
    return timing


async def offload(work: Path, partial: bool) -> Row:
    """Decode tok/s of the big model on the GPU, whole or with about half its layers there."""
    path = write_big_gguf(work / "big.gguf")
    hardware = {"vram_budget_bytes": path.stat().st_size // 2, "min_gpu_layer_ratio": 0.3} if partial else {}
    scheduler = llama_scheduler(work, [gguf_model("big", path)], hardware)
    name = "llama partial offload" if partial else "llama full offload"
    try:
        await chat_timing(scheduler, "big", tokens=8)
        timing = await chat_timing(scheduler, "big")
        placement = scheduler.get("big").placement
        layers = f"{placement.gpu_layers} GPU / {placement.pinned_ram_layers} host layers"
        rate = timing.decode_tokens_per_s or 0.0
        ok = rate > 0 and (placement.pinned_ram_layers > 0) == partial and placement.gpu_layers > 0
        return Row(path=name, ran=True, passed=ok, figure=f"{rate:.1f} tok/s decode", note=layers)
    finally:
        await scheduler.shutdown()


def pinned_copy_gbps(size: int) -> float:
    """A plain pinned host-to-device copy of `size` bytes with torch (best of three), GB/s."""
    import torch

    host = torch.empty(size, dtype=torch.uint8).pin_memory()
    device = torch.empty(size, dtype=torch.uint8, device="cuda")
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        started = time.perf_counter()
        device.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    del host, device
    torch.cuda.empty_cache()
    return size / best / 1e9


async def promotion(work: Path) -> Row:
    """Tier 2 -> 1 of the >= 2 GB model against a pinned copy of the same bytes (target >= 0.8x)."""
    from hypnos.types import MemoryTier

    path = write_big_gguf(work / "big.gguf")
    size = path.stat().st_size
    baseline = pinned_copy_gbps(size)
    scheduler = llama_scheduler(work, [gguf_model("big", path)])
    try:
        await scheduler.move("big", MemoryTier.TIER2)
        started = time.perf_counter()
        await scheduler.move("big", MemoryTier.TIER1)
        elapsed = time.perf_counter() - started
        row = ratio_row("tier 2 -> 1 promotion", size / elapsed / 1e9, baseline, 0.8)
        row.note = f"{size / 2**30:.2f} GiB in {elapsed:.2f} s"
        return row
    finally:
        await scheduler.shutdown()


async def demotion(work: Path) -> Row:
    """Tier 1 -> 2 frees the model's VRAM (NVML, the host's process figure) and keeps it warm."""
    from hypnos.types import MemoryTier

    path = write_big_gguf(work / "big.gguf")
    scheduler = llama_scheduler(work, [gguf_model("big", path)])
    try:
        await scheduler.move("big", MemoryTier.TIER1)
        pid = scheduler.get("big").engine.process_info().pid
        held = nvml_process_bytes(pid)
        await scheduler.move("big", MemoryTier.TIER2)
        left = nvml_process_bytes(pid)
        figure = f"host VRAM {held / MiB:.0f} -> {left / MiB:.0f} MiB"
        return Row(path="demotion", ran=True, passed=held > 0 and left <= 0.1 * held, figure=figure)
    finally:
        await scheduler.shutdown()


async def moe(work: Path) -> Row:
    """MoE expert offload: the same MoE model's VRAM with every expert on the GPU, then with them on the host."""
    from hypnos.types import MemoryTier

    path = write_big_gguf(work / "moe.gguf", layers=4, experts=8, dim=2048, ff=4096)
    figures = []
    for mode in ("off", "on"):
        scheduler = llama_scheduler(work, [gguf_model("moe", path, moe_offload=mode)])
        try:
            await scheduler.move("moe", MemoryTier.TIER1)
            figures.append(nvml_process_bytes(scheduler.get("moe").engine.process_info().pid))
        finally:
            await scheduler.shutdown()
    before, after = figures
    return Row(
        path="MoE expert offload",
        ran=True,
        passed=0 < after < 0.5 * before,
        figure=f"VRAM {before / MiB:.0f} -> {after / MiB:.0f} MiB",
    )


async def kv_cache(work: Path, parking: bool) -> Row:
    """A second turn reuses the first one's KV on CUDA: from the prompt cache, or parked across a demotion."""
    from hypnos.types import MemoryTier
    from hypnos_llama.testing import write_tiny_llama

    path = write_tiny_llama(work / "tiny.gguf", layers=4, dim=256, ff=512)
    hardware = {"kv_park": {"enabled": True}} if parking else {}
    scheduler = llama_scheduler(work, [gguf_model("tiny", path)], hardware)
    text = "the capital of France is Paris and " * 40
    try:
        await chat_timing(scheduler, "tiny", text, tokens=4)
        if parking:
            await scheduler.move("tiny", MemoryTier.TIER2)
        timing = await chat_timing(scheduler, "tiny", text + "the", tokens=4)
        cached = timing.cached_tokens or 0
        name = "KV parking on CUDA" if parking else "prompt cache on CUDA"
        return Row(path=name, ran=True, passed=cached > 100, figure=f"{cached} cached tokens on the second turn")
    finally:
        await scheduler.shutdown()


def hog_vram(leave_bytes: int) -> Any:
    """Fill the device with torch allocations until `leave_bytes` are free; returns them (freed when dropped)."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    return torch.empty(max(0, free - leave_bytes), dtype=torch.uint8, device="cuda")


async def oom_llama(work: Path, modality: str) -> Row:
    """With the device nearly full, a big prompt (chat) or batch (embeddings) ends in 507 device_out_of_memory after
    the idle models were evicted and the call retried once."""
    from hypnos.errors import HypnosError
    from hypnos.types import Modality
    from hypnos_llama.testing import chat_request, write_tiny_llama

    path = write_tiny_llama(work / "tiny.gguf", layers=4, dim=256, ff=512)
    models = [gguf_model("victim", path), gguf_model("target", path, context_len=65536, slots=1)]
    if modality == "embeddings":
        models[1] = {**models[1], "modality": "embeddings", "modalities": ["embeddings"]}
    scheduler = llama_scheduler(work, models)
    name = f"OOM: llama {'chat' if modality == 'chat' else 'embeddings'}"
    try:
        await chat_timing(scheduler, "victim", tokens=2)
        async with scheduler.lease(
            "target", Modality.TEXT_GENERATION if modality == "chat" else Modality.EMBEDDINGS
        ) as lease:
            hog = hog_vram(64 * MiB)
            try:
                if modality == "chat":
                    request = chat_request("Paris " * 60000, max_tokens=1)
                    await lease.run_with_oom_retry(lambda engine: _drain(engine.chat(request, lease.cancel)))
                else:
                    from hypnos.engine import EmbeddingInput

                    texts: list[EmbeddingInput] = ["Paris " * 500] * 512
                    await lease.run_with_oom_retry(lambda engine: engine.embed(texts, lease.cancel))
            except HypnosError as error:
                evicted = [e.model for e in scheduler.recent_evictions if e.reason == "device_out_of_memory"]
                ok = error.status == 507 and "victim" in evicted
                return Row(
                    path=name, ran=True, passed=ok, figure=f"{error.status} {error.type}", note=f"evicted {evicted}"
                )
            finally:
                del hog
        return Row(path=name, ran=True, passed=False, note="the request fit: no OOM was forced")
    finally:
        await scheduler.shutdown()


async def _drain(events: Any) -> None:
    async for _ in events:
        pass


async def nvml(work: Path) -> Row:
    """The device's used/total VRAM and a process's VRAM through NVML (what the status reads) against nvidia-smi."""
    import torch
    from hypnos.config import HardwareConfig
    from hypnos.hardware import SystemHardware

    block = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    probe = SystemHardware(HardwareConfig())
    total = probe.info().total_vram_bytes / MiB
    used = total - (probe.vram_free_bytes() or 0) / MiB
    smi_used, smi_total = (float(v) for v in nvidia_smi("memory.used,memory.total")[0])
    import os

    mine = nvml_process_bytes(os.getpid()) / MiB
    apps = {int(r[0]): float(r[1]) for r in nvidia_smi("pid,used_memory", apps=True)}
    del block
    pairs = [("total", total, smi_total), ("used", used, smi_used), ("process", mine, apps.get(os.getpid(), 0.0))]
    return agreement_row("NVML vs nvidia-smi", pairs, 0.05)


async def diffusers_offload(work: Path) -> Row:
    """The tiny pipeline with a partial placement (diffusers group offload) makes an image on CUDA."""
    from hypnos.types import Modality
    from hypnos_diffusion import testing

    folder = testing.write_tiny_pipeline(work / "tiny-sd")
    table = testing.model_table(str(folder))
    scheduler = llama_scheduler(work, [table], {"vram_budget_bytes": 8 * MiB, "min_gpu_layer_ratio": 0.0})
    try:
        from hypnos.engine import ImageInput

        async with scheduler.lease(table["id"], Modality.IMAGE_GENERATION) as lease:
            started = time.perf_counter()
            result = await lease.engine.generate_images(
                ImageInput(prompt="a red square", n=1, width=64, height=64), lease.cancel
            )
            elapsed = time.perf_counter() - started
        placement = scheduler.get(table["id"]).placement
        ok = bool(result.images) and placement.pinned_ram_layers > 0
        return Row(
            path="diffusers group offload",
            ran=True,
            passed=ok,
            figure=f"{elapsed:.2f} s per image",
            note=f"{placement.gpu_layers} GPU layers",
        )
    finally:
        await scheduler.shutdown()


async def gliner_cuda(work: Path) -> Row:
    """The tiny GLiNER (torch) extracts entities on CUDA."""
    from hypnos.engine import EntityInput
    from hypnos.types import Modality
    from hypnos_gliner import testing

    testing.build_tiny_gliner(work / testing.TINY_NAME, onnx=False)
    scheduler = llama_scheduler(work, [testing.model_table(runtime="torch")])
    try:
        async with scheduler.lease(testing.TINY_NAME, Modality.ENTITY_EXTRACTION) as lease:
            started = time.perf_counter()
            await lease.engine.extract_entities(
                EntityInput(texts=["Paris is in France"], labels=["city"]), lease.cancel
            )
        return Row(
            path="GLiNER on torch CUDA",
            ran=True,
            passed=True,
            figure=f"{(time.perf_counter() - started) * 1000:.0f} ms",
        )
    finally:
        await scheduler.shutdown()


async def onnxruntime_cuda(work: Path) -> Row:
    """ONNX Runtime lists its CUDA provider and runs a one-node graph on it."""
    import onnxruntime

    providers = onnxruntime.get_available_providers()
    ok = "CUDAExecutionProvider" in providers
    return Row(path="ONNX Runtime CUDA provider", ran=True, passed=ok, figure=", ".join(providers))


async def ctranslate2_cuda(work: Path) -> Row:
    """CTranslate2 sees the CUDA device."""
    import ctranslate2

    count = ctranslate2.get_cuda_device_count()
    return Row(path="CTranslate2 (whisper) on CUDA", ran=True, passed=count > 0, figure=f"{count} CUDA devices")


async def oom_diffusers(work: Path) -> Row:
    """The image engine's OOM mapping on a full device: 507 device_out_of_memory."""
    from hypnos.engine import ImageInput
    from hypnos.errors import HypnosError
    from hypnos.types import Modality
    from hypnos_diffusion import testing

    folder = testing.write_tiny_pipeline(work / "tiny-sd")
    table = testing.model_table(str(folder))
    scheduler = llama_scheduler(work, [table])
    try:
        async with scheduler.lease(table["id"], Modality.IMAGE_GENERATION) as lease:
            hog = hog_vram(8 * MiB)
            try:
                job = ImageInput(prompt="a red square", n=8, width=1024, height=1024)
                await lease.run_with_oom_retry(lambda engine: engine.generate_images(job, lease.cancel))
            except HypnosError as error:
                return Row(
                    path="OOM: diffusers", ran=True, passed=error.status == 507, figure=f"{error.status} {error.type}"
                )
            finally:
                del hog
        return Row(path="OOM: diffusers", ran=True, passed=False, note="no OOM was forced")
    finally:
        await scheduler.shutdown()


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
