"""The torch side (imported only once an engine loads): read a pipeline, move its weights, run jobs, encode PNGs."""

from __future__ import annotations

import inspect
import io
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from hypnos.engine import DeviceOutOfMemory
from hypnos.errors import invalid_request

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_dtype(name: str, device: str) -> str:
    """The dtype name to load in: `auto` is bfloat16 (float16 without bf16 support) on CUDA, float32 on the CPU."""
    if name != "auto":
        return name
    if device == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def read_pipeline(folder: Path, dtype: str, variant: str | None) -> Any:
    """The folder's own pipeline class, weights read from disk into host RAM (never a hub: local_files_only)."""
    from diffusers import DiffusionPipeline

    return DiffusionPipeline.from_pretrained(
        str(folder), local_files_only=True, dtype=DTYPES[dtype], variant=variant, use_safetensors=True
    )


def modules(pipe: Any) -> dict[str, torch.nn.Module]:
    """The pipeline's weighted components (text encoders, unet or transformer, vae) by name."""
    return {name: part for name, part in pipe.components.items() if isinstance(part, torch.nn.Module)}


def _tensors(module: torch.nn.Module) -> Iterable[tuple[str, torch.Tensor]]:
    yield from module.named_parameters()
    yield from module.named_buffers()


def move_tensors(module: torch.nn.Module, device: str, *, pin: bool = False, skip: tuple[str, ...] = ()) -> int:
    """Move a module's parameters and buffers (those not under `skip` prefixes) to `device`; bytes moved.

    Towards the CPU with `pin`, into page-locked memory; from pinned memory to CUDA, without blocking (the caller
    synchronizes). Parameters keep their identity (only `.data` changes), so hooks and optimizers stay valid.
    """
    moved = 0
    for name, tensor in _tensors(module):
        if skip and name.startswith(skip):
            continue
        data = tensor.data
        if device == "cpu" and pin:
            if data.is_pinned():
                continue
            target = torch.empty(data.shape, dtype=data.dtype, device="cpu", pin_memory=True)
            target.copy_(data)
        elif data.device.type == device:
            continue
        else:
            target = data.to(device, non_blocking=data.is_pinned())
        tensor.data = target
        moved += data.numel() * data.element_size()
    return moved


def offload_blocks(denoiser: torch.nn.Module, blocks: list[str], device: str, offload_type: str) -> None:
    """Stream the named blocks from host RAM onto `device` as they run (diffusers group offloading)."""
    from diffusers.hooks import apply_group_offloading

    for name in blocks:
        kwargs: dict[str, Any] = {"offload_type": offload_type, "use_stream": device == "cuda"}
        if offload_type == "block_level":
            kwargs["num_blocks_per_group"] = 1
        apply_group_offloading(
            denoiser.get_submodule(name), onload_device=torch.device(device), offload_device=torch.device("cpu"),
            **kwargs,
        )  # fmt: skip


def sync(device: str) -> None:
    """Wait for queued copies to the device."""
    if device == "cuda":
        torch.cuda.synchronize()


def free_device_cache(device: str) -> None:
    """Hand cached device blocks back to the driver."""
    if device == "cuda":
        torch.cuda.empty_cache()


def derived(pipe: Any, edit: bool) -> Any:
    """The pipeline for a job: an edit pipeline or image-to-image for edits, text-to-image otherwise (components
    shared, nothing copied)."""
    from diffusers import AutoPipelineForImage2Image, AutoPipelineForText2Image

    takes_image = "image" in inspect.signature(pipe.__call__).parameters
    if edit:
        chosen = pipe if takes_image else AutoPipelineForImage2Image.from_pipe(pipe)
    elif not takes_image or "Img2Img" not in type(pipe).__name__:
        chosen = pipe
    else:
        chosen = AutoPipelineForText2Image.from_pipe(pipe)
    chosen.set_progress_bar_config(disable=True)
    return chosen


def decode_references(references: list[bytes], width: int, height: int) -> list[Any]:
    """The uploaded images as RGB at the output size; 400 when one is not a readable image."""
    from PIL import Image, UnidentifiedImageError

    out = []
    for index, data in enumerate(references):
        try:
            with Image.open(io.BytesIO(data)) as image:
                if image.format not in ("PNG", "JPEG", "WEBP"):
                    raise invalid_request(f"image {index}: expected PNG, JPEG or WebP, got {image.format}")
                out.append(image.convert("RGB").resize((width, height), Image.Resampling.LANCZOS))
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError):  # PIL's text names a BytesIO repr
            raise invalid_request(f"image {index} is not a readable PNG, JPEG or WebP image") from None
    return out


def compose(images: list[Any]) -> Any:
    """One starting image from several references (their average), for pipelines that take a single image."""
    import numpy as np
    from PIL import Image

    if len(images) == 1:
        return images[0]
    stack = np.mean([np.asarray(image, dtype=np.float32) for image in images], axis=0)
    return Image.fromarray(np.clip(stack + 0.5, 0, 255).astype(np.uint8))


def png_bytes(image: Any) -> bytes:
    """A PIL image as PNG bytes (deterministic for the same pixels)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def call_arguments(pipe: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    """The arguments this pipeline's __call__ accepts (Flux takes no negative_prompt, SD no true_cfg_scale)."""
    accepted = inspect.signature(pipe.__call__).parameters
    return {key: value for key, value in wanted.items() if key in accepted and value is not None}


def run(pipe: Any, arguments: dict[str, Any], device: str, on_step: Callable[[int], None]) -> list[Any]:
    """Call the pipeline; on_step runs after each denoising step (it raises to stop); PIL images out.

    A device out-of-memory error becomes DeviceOutOfMemory so the scheduler evicts idle models and retries once.
    """

    def step_end(_pipe: Any, step: int, _timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        on_step(step)
        return tensors

    if "callback_on_step_end" in inspect.signature(pipe.__call__).parameters:
        arguments = {**arguments, "callback_on_step_end": step_end, "callback_on_step_end_tensor_inputs": []}
    try:
        with torch.inference_mode():
            return list(pipe(**arguments, output_type="pil").images)
    except torch.OutOfMemoryError as error:
        free_device_cache(device)
        raise DeviceOutOfMemory(f"the image model ran out of {device} memory: {str(error)[:200]}") from error


def generators(seeds: list[int]) -> list[torch.Generator]:
    """One seeded CPU generator per image: the same seed gives the same starting noise on any device."""
    return [torch.Generator(device="cpu").manual_seed(seed) for seed in seeds]
