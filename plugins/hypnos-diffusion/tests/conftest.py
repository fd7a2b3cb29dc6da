"""Fixtures: one tiny random Stable Diffusion pipeline written per session, engines over it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypnos.config import settings_from_mapping
from hypnos.engine import EngineContext
from hypnos_diffusion.plugin import make_engine
from hypnos_diffusion.testing import MODEL_ID, model_table, write_tiny_pipeline

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest_plugins = ["hypnos.testing.conformance"]


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models_dir holding the tiny pipeline under `tiny-sd`."""
    folder = tmp_path_factory.mktemp("models")
    write_tiny_pipeline(folder / MODEL_ID)
    return folder


@pytest.fixture
def new_engine(models_dir: Path) -> Callable[..., Any]:
    """Make a fresh (tier 3) engine over the tiny pipeline, [models.image] keys overridden by keyword."""

    def make(**image: Any) -> Any:
        table = model_table(MODEL_ID)
        table["image"].update(image)
        settings = settings_from_mapping({"models_dir": str(models_dir), "models": [table]})
        context = EngineContext(models_dir=settings.models_path, limits=settings.limits)
        return make_engine(settings.models[0], context)

    return make
