"""The llama.cpp paths on CUDA: offload, MoE experts, promotion against a pinned copy, demotion, KV, forced OOM."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tools.gpu_check.device_kit import MiB, drain, gguf_model, hog_vram, llama_scheduler, nvml_process_bytes
from tools.gpu_check.table import Row, ratio_row

BIG_LAYERS, BIG_DIM, BIG_FF = 10, 4096, 11008  # ~2.2 GB of f16 weights


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
                    await lease.run_with_oom_retry(lambda engine: drain(engine.chat(request, lease.cancel)))
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
