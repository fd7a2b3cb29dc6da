"""The `[models.image]` table of a diffusers model, decoded by core at config load (cheap: no torch)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

Size = Annotated[str, msgspec.Meta(pattern=r"^\d+[xX]\d+$")]


class ImageOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[models.image]` table."""

    edit: bool = False  # the model edits: /v1/images/edits takes its uploads as references
    steps: Annotated[int, msgspec.Meta(ge=1, le=100)] = 20  # default denoising steps (4-8 for turbo models)
    cfg_scale: float = 3.0  # default guidance (1.0 for distilled models)
    strength: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.75  # image-to-image edits: how far from the reference
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    variant: str | None = None  # weight files variant to load (e.g. "fp16")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    offload: Literal["leaf_level", "block_level"] = "leaf_level"  # group offloading of a partial placement
    max_batch: Annotated[int, msgspec.Meta(ge=1)] = 1  # images per pipeline call; the workspace is booked for these
    workspace_size: Size = "1024x1024"  # the largest image size the activation workspace is booked for
    workspace_bytes_per_pixel: int | None = None  # override the per-pixel activation figure

    def workspace_sides(self) -> tuple[int, int]:
        """workspace_size as (width, height)."""
        width, _, height = self.workspace_size.lower().partition("x")
        return int(width), int(height)
