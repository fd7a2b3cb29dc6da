"""The `diffusers` engine: a diffusers pipeline folder served with real tiers (device, warm host RAM, files)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import msgspec
from hypnos.config import ModelConfig
from hypnos.engine import (
    CancelToken,
    EngineCapabilities,
    EngineContext,
    GeneratedImage,
    ImageInput,
    ImageResult,
    MemoryEstimate,
)
from hypnos.errors import invalid_request
from hypnos.kit.staged import StagedEngine, check_cancelled
from hypnos.types import EngineTiming, LayerPlacementPlan

from hypnos_diffusion import estimate as files
from hypnos_diffusion.options import ImageOptions

logger = logging.getLogger(__name__)


class DiffusersEngine(StagedEngine):
    """Tier 1: the pipeline's components on the device; tier 2: their weights in host RAM (pinned on CUDA hosts),
    so a promotion is a memory copy; tier 3: files only. A partial plan streams the denoiser's last blocks."""

    options_table = "image"
    options_type = ImageOptions
    build_consumes_warm_copy = True

    def __init__(self, model: ModelConfig, context: EngineContext) -> None:
        super().__init__(model, context)
        self.options: ImageOptions
        self.folder: Path = self.model_path("weights_path", "a diffusers pipeline folder")
        wanted = self.options.device
        self.target_device = context.accelerator if wanted == "auto" else wanted
        if self.target_device not in ("cpu", "cuda"):
            self.target_device = "cpu"
        self._pipe: Any = None  # the pipeline; its weights are host RAM (tier 2) or on the device (tier 1)
        self._derived: dict[bool, Any] = {}  # edit? -> the pipeline serving that kind of job (shares components)
        self.offloaded_blocks: list[str] = []  # denoiser blocks streamed from host RAM (a partial placement)

    def capabilities(self) -> EngineCapabilities:
        """Edits when [models.image] edit = true (image-to-image, or the pipeline's own edit mode)."""
        return EngineCapabilities(image_edit=self.options.edit)

    @property
    def pipeline(self) -> Any:
        """The loaded diffusers pipeline (tier 1 or 2), or None at tier 3."""
        return self._pipe

    # ---- memory -------------------------------------------------------------------------------------------------

    def _dtype_name(self) -> str | None:
        if self.options.dtype != "auto":
            return self.options.dtype
        return "float32" if self.target_device == "cpu" else None  # CUDA: bf16/fp16, 2 bytes like most files

    def _per_pixel(self, dtype: str | None) -> int:
        """Activation bytes per output pixel: the VAE decoder's widest full-resolution activations, ~6 live."""
        if self.options.workspace_bytes_per_pixel is not None:
            return self.options.workspace_bytes_per_pixel
        channels = 128
        try:
            config = msgspec.json.decode((self.folder / "vae" / "config.json").read_bytes())
            channels = int(config.get("block_out_channels", [channels])[0])
        except (OSError, msgspec.DecodeError, TypeError, ValueError, IndexError):
            pass
        return 6 * channels * files.TARGET_BYTES.get(dtype or "float16", 2)

    def estimate(self) -> MemoryEstimate:
        """Weights from the safetensors headers of every component; the denoiser's blocks are the layers; the
        activation workspace grows with the booked width x height x max_batch."""
        dtype = self._dtype_name()
        components = files.pipeline_components(self.folder, self.options.variant)
        weights = sum(c.nbytes(dtype) for c in components)
        layers: list[int] = []
        denoiser = files.denoiser_name(components)
        if denoiser is not None:
            _, layers = files.block_bytes(next(c for c in components if c.name == denoiser), dtype)
        width, height = self.options.workspace_sides()
        workspace = files.activation_bytes(width, height, self.options.max_batch, self._per_pixel(dtype))
        return MemoryEstimate(
            weight_bytes=weights,
            layer_bytes=layers,
            non_layer_bytes=weights - sum(layers),
            workspace_bytes=workspace,
            supports_partial_offload=len(layers) > 1,
        )

    # ---- the tier hooks (on the worker thread) ------------------------------------------------------------------

    def read_weights(self) -> None:
        """Tier 3 -> 2: read the pipeline from its folder into host RAM; on a CUDA host, page-locked."""
        if self._pipe is not None:
            return  # release_device already left the weights in host RAM
        from hypnos_diffusion import pipeline

        dtype = pipeline.resolve_dtype(self.options.dtype, self.target_device)
        started = time.perf_counter()
        pipe = pipeline.read_pipeline(self.folder, dtype, self.options.variant)
        pipe.set_progress_bar_config(disable=True)
        pinned = 0
        if self.target_device == "cuda":
            pinned = sum(pipeline.move_tensors(m, "cpu", pin=True) for m in pipeline.modules(pipe).values())
        self._pipe = pipe
        logger.info("%s: read into host RAM in %.0f ms (%d bytes pinned)", self.model.id,
                    (time.perf_counter() - started) * 1000, pinned)  # fmt: skip

    def build(self, plan: LayerPlacementPlan) -> None:
        """Tier 2 -> 1: copy the components onto the device; with fewer gpu_layers than blocks, the denoiser's
        last blocks stay in host RAM and stream in as they run (group offloading, with streams on CUDA)."""
        from hypnos_diffusion import estimate as est
        from hypnos_diffusion import pipeline

        if self._pipe is None:
            self.read_weights()
        device = self.target_device
        parts = pipeline.modules(self._pipe)
        denoiser = next((name for name in est.DENOISERS if name in parts), None)
        blocks: list[str] = []
        if denoiser is not None and plan.pinned_ram_layers > 0:
            names, _ = est.block_bytes(
                next(c for c in est.pipeline_components(self.folder, self.options.variant) if c.name == denoiser),
                None,
            )
            blocks = names[max(0, len(names) - plan.pinned_ram_layers) :]
        moved = 0
        for name, module in parts.items():
            skip = tuple(f"{block}." for block in blocks) if name == denoiser else ()
            moved += pipeline.move_tensors(module, device, skip=skip)
        pipeline.sync(device)
        if blocks and denoiser is not None:
            pipeline.offload_blocks(parts[denoiser], blocks, device, self.options.offload)
        self.offloaded_blocks = blocks
        self.device = device
        logger.info("%s: %d bytes onto %s, %d denoiser blocks streamed from host RAM", self.model.id, moved,
                    device, len(blocks))  # fmt: skip

    def release_device(self) -> None:
        """Tier 1 -> 2: copy the weights back into (pinned) host RAM; a partial placement's hooks are dropped with
        the pipeline, which is then read again from its files."""
        from hypnos_diffusion import pipeline

        self._derived.clear()
        if self.offloaded_blocks:
            self._pipe, self.offloaded_blocks = None, []
        elif self._pipe is not None:
            pin = self.target_device == "cuda"
            for module in pipeline.modules(self._pipe).values():
                pipeline.move_tensors(module, "cpu", pin=pin)
        pipeline.free_device_cache(self.target_device)

    def release_warm(self) -> None:
        """Tier 2 -> 3: drop the pipeline."""
        self._pipe = None
        self._derived.clear()

    # ---- images -------------------------------------------------------------------------------------------------

    async def generate_images(self, job: ImageInput, cancel: CancelToken) -> ImageResult:
        """Generate n images (image i with seed + i), or edit from the references; stops at the next step when
        cancelled."""
        self.require_ready()
        if job.references and not self.options.edit:
            raise invalid_request(f"The model `{self.model.id}` does not edit images ([models.image] edit = true)")
        return await self.run_blocking(self._generate, job, cancel)

    def _generate(self, job: ImageInput, cancel: CancelToken) -> ImageResult:
        from hypnos_diffusion import pipeline

        self.require_ready()
        edit = bool(job.references)
        if edit not in self._derived:
            self._derived[edit] = pipeline.derived(self._pipe, edit)
        pipe = self._derived[edit]
        wanted: dict[str, Any] = {
            "prompt": job.prompt,
            "negative_prompt": job.negative_prompt,
            "num_inference_steps": job.steps or self.options.steps,
            "guidance_scale": self.options.cfg_scale if job.cfg_scale is None else job.cfg_scale,
            "width": job.width,
            "height": job.height,
        }
        if edit:
            references = pipeline.decode_references(job.references, job.width, job.height)
            native = pipe is self._pipe  # an edit pipeline takes every reference; image-to-image starts from one
            wanted["image"] = references if native and len(references) > 1 else pipeline.compose(references)
            wanted["strength"] = self.options.strength
        steps = 0
        last = 0.0

        def on_step(_step: int) -> None:
            nonlocal steps, last
            check_cancelled(cancel)
            steps += 1
            last = time.perf_counter()

        check_cancelled(cancel)
        started = time.perf_counter()
        images: list[GeneratedImage] = []
        batch = max(1, self.options.max_batch)
        for start in range(0, job.n, batch):
            seeds = [job.seed + index for index in range(start, min(job.n, start + batch))]
            arguments = pipeline.call_arguments(pipe, wanted)
            arguments["num_images_per_prompt"] = len(seeds)
            arguments["generator"] = pipeline.generators(seeds)
            out = pipeline.run(pipe, arguments, self.device, on_step)
            images.extend(GeneratedImage(png=pipeline.png_bytes(im), seed=s) for im, s in zip(out, seeds, strict=True))
        rate = round(steps / (last - started), 3) if steps and last > started else None
        return ImageResult(images=images, timing=EngineTiming(steps=steps, steps_per_s=rate))
