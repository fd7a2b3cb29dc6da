"""The `diffusion` entry point: the `diffusers` engine kind; cheap to import (torch and diffusers load lazily)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from hypnos.config import ModelConfig
from hypnos.engine import Engine, EngineContext, EngineKind, missing_library
from hypnos.hookspecs import hookimpl
from hypnos.types import Modality

KIND = "diffusers"


def make_engine(model: ModelConfig, context: EngineContext) -> Engine:
    """A diffusers engine (checks that torch, diffusers and transformers are installed)."""
    if importlib.util.find_spec("torch") is None:
        raise missing_library("torch")  # the build for the machine: see the README
    for package in ("diffusers", "transformers", "safetensors"):
        if importlib.util.find_spec(package) is None:
            raise missing_library(package, "hypnos-diffusion[diffusers]")
    from hypnos_diffusion.engine import DiffusersEngine

    return DiffusersEngine(model, context)


@hookimpl
def hypnos_engine_kinds() -> list[EngineKind]:
    """Image generation and edits on diffusers pipelines (SD 1.x/2.x, SDXL, SD3, Flux, Sana, ...)."""
    from hypnos_diffusion.options import ImageOptions

    return [
        EngineKind(KIND, frozenset({Modality.IMAGE_GENERATION}), make_engine,
                   description="diffusers pipelines on torch: image generation and image-to-image edits",
                   options={"image": ImageOptions}, spec_kind="ggml_diffusion",  # the API's image engine kind
                   # torch's threads spin ~0.1 ms between regions, then sleep: one image of the tiny pipeline took
                   # 0.79x the in-process time with OMP_WAIT_POLICY=PASSIVE, 1.06x with this (bench diffusion)
                   process_env={"GOMP_SPINCOUNT": "10000"},
                   process_nice=10),  # a batch engine: a chat or speech beside it keeps its cores
    ]  # fmt: skip


@hookimpl
def hypnos_starter_models(models_dir: Path) -> list[dict[str, Any]]:
    """The tiny local pipeline once `python -m hypnos_diffusion.testing DIR` (./run.sh --with images) wrote it."""
    from hypnos_diffusion.testing import MODEL_ID, model_table

    if not (Path(models_dir) / MODEL_ID / "model_index.json").is_file():
        return []
    return [model_table(MODEL_ID)]
