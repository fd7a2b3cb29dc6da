"""The engine conformance suite (hypnos.testing.conformance) on the tiny random Stable Diffusion pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos.config import settings_from_mapping
from hypnos.engine import CancelToken, EngineContext, ImageInput
from hypnos.testing.conformance import ConformanceTarget, MissingLibrary
from hypnos_diffusion import plugin
from hypnos_diffusion.testing import MODEL_ID, model_table

pytestmark = pytest.mark.model


async def _generate(engine, cancel: CancelToken):  # type: ignore[no-untyped-def]
    return await engine.generate_images(ImageInput(prompt="a fox", width=256, height=256, steps=3, seed=1), cancel)


async def _broken_reference(engine, cancel: CancelToken):  # type: ignore[no-untyped-def]
    job = ImageInput(prompt="edit", width=256, height=256, steps=2, references=[b"GIF89a not really"])
    return await engine.generate_images(job, cancel)


@pytest.fixture
def conformance_engine(models_dir: Path) -> ConformanceTarget:
    """The `diffusers` kind serving the tiny pipeline, its workspace booked for the 256x256 request."""
    table = model_table(MODEL_ID)
    table["image"]["workspace_size"] = "256x256"
    settings = settings_from_mapping({"models_dir": str(models_dir), "models": [table]})
    context = EngineContext(models_dir=settings.models_path, limits=settings.limits)
    kind = next(kind for kind in plugin.hypnos_engine_kinds() if kind.name == plugin.KIND)
    missing = MissingLibrary("diffusers", modules=("diffusers",), distributions=("diffusers",))
    return ConformanceTarget(kind, settings.models[0], context, _generate, bad_request=_broken_reference,
                             missing_library=missing)  # fmt: skip
