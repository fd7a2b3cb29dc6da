"""The engine in-process on the tiny random pipeline: estimate, tiers, partial placement, cancellation, errors."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypnos.engine import CancelToken, DeviceOutOfMemory, EngineUnavailable, ImageInput
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


class CancelAfter(CancelToken):
    """A token that turns cancelled after it was checked `checks` times (the engine checks once per step)."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self.left = checks
        self.reads = 0

    @property
    def cancelled(self) -> bool:
        self.reads += 1
        self.left -= 1
        return self.left < 0


async def test_cancellation_stops_at_the_next_step(new_engine) -> None:
    engine = new_engine()
    await engine.load(TIER1)
    try:
        token = CancelAfter(3)
        with pytest.raises(HypnosError) as stopped:
            await engine.generate_images(ImageInput(prompt="long", width=256, height=256, steps=100, n=4), token)
        assert stopped.value.status == 499
        assert token.reads == 4  # before the job, after steps 1 and 2, and the step that saw it: not 400 steps
        assert len((await engine.generate_images(JOB, CancelToken())).images) == 1  # the engine still serves
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


def test_missing_library_names_the_package(new_engine, monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "diffusers" else real(name, *a))
    with pytest.raises(EngineUnavailable) as error:
        new_engine()
    assert error.value.status == 503 and "hypnos-diffusion[diffusers]" in error.value.message
