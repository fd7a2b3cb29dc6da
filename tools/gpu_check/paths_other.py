"""The other CUDA paths: NVML against nvidia-smi, diffusers group offload and OOM, GLiNER, ONNX Runtime, CTranslate2."""

from __future__ import annotations

import time
from pathlib import Path

from tools.gpu_check.device_kit import MiB, hog_vram, llama_scheduler, nvidia_smi, nvml_process_bytes
from tools.gpu_check.table import Row, agreement_row


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
