"""The engine in-process on the tiny random pipeline: estimate, identical answers across tiers, partial placement,
OOM, references (the conformance suite covers the rest)."""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypnos.engine import CancelToken, DeviceOutOfMemory, ImageInput
from hypnos.errors import HypnosError
from hypnos.types import LayerPlacementPlan, MemoryTier
from hypnos_diffusion import plugin

TIER1 = LayerPlacementPlan(primary_tier=MemoryTier.TIER1)
TIER2 = LayerPlacementPlan(primary_tier=MemoryTier.TIER2)
JOB = ImageInput(prompt="a lighthouse at dawn", width=256, height=256, steps=3, seed=11)


def digest(result: Any) -> list[str]:
    return [hashlib.sha256(image.png).hexdigest() for image in result.images]


def held_bytes(engine: Any) -> int:
    """Bytes of every weight tensor the loaded pipeline's components hold."""
    import torch

    total = 0
    for part in engine.pipeline.components.values():
        if isinstance(part, torch.nn.Module):
            total += sum(t.numel() * t.element_size() for t in part.state_dict().values())
    return total


async def test_estimate_is_the_bytes_the_loaded_components_hold(new_engine) -> None:
    engine = new_engine()
    estimate = engine.estimate()
    await engine.load(TIER2)
    try:
        assert estimate.weight_bytes == held_bytes(engine)
    finally:
        await engine.unload()
    # the UNet's down blocks, mid block and up blocks, in the order they run, are the layers a plan may split
    assert len(estimate.layer_bytes) == 5 and estimate.supports_partial_offload
    assert estimate.non_layer_bytes + sum(estimate.layer_bytes) == estimate.weight_bytes


def test_estimate_follows_dtype_and_workspace(new_engine) -> None:
    full = new_engine(dtype="float32").estimate()
    half = new_engine(dtype="float16").estimate()
    assert full.weight_bytes > half.weight_bytes >= full.weight_bytes // 2
    small = new_engine(workspace_size="256x256").estimate().workspace_bytes
    assert new_engine(workspace_size="512x512").estimate().workspace_bytes == 4 * small
    assert new_engine(workspace_size="256x256", max_batch=2).estimate().workspace_bytes == 2 * small


def test_estimate_ignores_files_that_are_not_loaded(models_dir: Path, tmp_path: Path, new_engine) -> None:
    before = new_engine().estimate().weight_bytes
    copy = tmp_path / "copy"
    shutil.copytree(models_dir / "tiny-sd", copy / "tiny-sd")
    (copy / "tiny-sd" / "unet" / "diffusion_pytorch_model.bin").write_bytes(b"\0" * 3_000_000)
    (copy / "tiny-sd" / "notes.safetensors").write_bytes(b"\0" * 1_000_000)
    from hypnos.config import settings_from_mapping
    from hypnos.engine import EngineContext
    from hypnos_diffusion.testing import model_table

    settings = settings_from_mapping({"models_dir": str(copy), "models": [model_table("tiny-sd")]})
    engine = plugin.make_engine(settings.models[0], EngineContext(models_dir=copy, limits=settings.limits))
    assert engine.estimate().weight_bytes == before


def test_estimate_reads_the_files_of_the_chosen_variant(tmp_path: Path) -> None:
    from hypnos_diffusion.estimate import weight_files

    shards = [f"big{variant}-0000{index}-of-00002.safetensors" for variant in ("", ".fp16") for index in (1, 2)]
    for name in ["model.safetensors", "model.fp16.safetensors", *shards]:
        (tmp_path / name).write_bytes(b"")
    plain = [f.name for f in weight_files(tmp_path, None)]
    assert plain == ["big-00001-of-00002.safetensors", "big-00002-of-00002.safetensors", "model.safetensors"]
    half = [f.name for f in weight_files(tmp_path, "fp16")]
    assert half == ["big.fp16-00001-of-00002.safetensors", "big.fp16-00002-of-00002.safetensors",
                    "model.fp16.safetensors"]  # fmt: skip


async def test_tier_walk_keeps_answers_identical(new_engine) -> None:
    engine = new_engine()
    try:
        await engine.load(TIER2)
        with pytest.raises(HypnosError) as refused:
            await engine.generate_images(JOB, CancelToken())
        assert refused.value.status == 503
        await engine.load(TIER1)
        first = digest(await engine.generate_images(JOB, CancelToken()))
        await engine.demote(MemoryTier.TIER2)
        assert engine.pipeline is not None  # warm: the weights stay in host RAM
        await engine.load(TIER1)
        assert digest(await engine.generate_images(JOB, CancelToken())) == first
        await engine.demote(MemoryTier.TIER3)
        assert engine.pipeline is None
        await engine.load(TIER1)
        assert digest(await engine.generate_images(JOB, CancelToken())) == first
    finally:
        await engine.unload()


async def test_partial_placement_streams_the_last_blocks_and_answers_the_same(new_engine) -> None:
    engine = new_engine()
    try:
        await engine.load(TIER1)
        whole = digest(await engine.generate_images(JOB, CancelToken()))
        await engine.demote(MemoryTier.TIER2)
        await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1, gpu_layers=3, pinned_ram_layers=2))
        assert engine.offloaded_blocks == ["up_blocks.0", "up_blocks.1"]
        assert digest(await engine.generate_images(JOB, CancelToken())) == whole
        await engine.demote(MemoryTier.TIER2)
        await engine.load(TIER1)
        assert engine.offloaded_blocks == []
        assert digest(await engine.generate_images(JOB, CancelToken())) == whole
    finally:
        await engine.unload()


async def test_device_out_of_memory_becomes_the_retryable_507(new_engine, monkeypatch) -> None:
    import torch
    from diffusers import StableDiffusionPipeline

    def out_of_memory(self: Any, **kwargs: Any) -> Any:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    engine = new_engine()
    await engine.load(TIER1)
    try:
        monkeypatch.setattr(StableDiffusionPipeline, "__call__", out_of_memory)
        with pytest.raises(DeviceOutOfMemory) as error:
            await engine.generate_images(JOB, CancelToken())
        assert error.value.status == 507 and error.value.type == "device_out_of_memory"
    finally:
        await engine.unload()


async def test_unreadable_reference_is_a_400(new_engine) -> None:
    engine = new_engine()
    await engine.load(TIER1)
    try:
        job = ImageInput(prompt="edit", width=256, height=256, steps=2, references=[b"not an image"])
        with pytest.raises(HypnosError) as error:
            await engine.generate_images(job, CancelToken())
        assert error.value.status == 400
        from PIL import Image

        gif = io.BytesIO()
        Image.new("RGB", (8, 8)).save(gif, format="GIF")
        with pytest.raises(HypnosError) as error:
            await engine.generate_images(ImageInput(prompt="e", steps=2, references=[gif.getvalue()]), CancelToken())
        assert error.value.status == 400 and "GIF" in error.value.message
    finally:
        await engine.unload()


def test_the_kind_is_reported_as_the_api_s_image_engine_kind_with_diffusers_as_backend() -> None:
    from hypnos.types import Modality

    (kind,) = plugin.hypnos_engine_kinds()
    assert (kind.wire_kind(Modality.IMAGE_GENERATION), kind.wire_backend) == ("ggml_diffusion", "diffusers")
