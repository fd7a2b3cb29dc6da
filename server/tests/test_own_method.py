"""A plugin's own engine method (moderation_plugin.py: `moderate` and POST /v1/moderations): served through an engine
host like the core's methods, refused with a 400 by a model whose engine lacks it, and passing the conformance suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import moderation_plugin
import pytest
from litestar.testing import TestClient
from server_kit import build_app, config, error_of, wait_ready

HERE = Path(__file__).parent
MODELS = [
    {"id": "mod", "modality": "entity_extraction", "engine": "moderation", "moderation": {"words": ["awful"]}},
    {"id": "fake-entities", "modality": "entity_extraction", "engine": "fake"},
]


@pytest.fixture
def hosted(monkeypatch: pytest.MonkeyPatch):
    """An app with the moderation plugin, each model in an engine host (which imports the plugin's module)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    app = build_app(config(models=MODELS, server={"isolation": "process"}), plugins=[moderation_plugin])
    with TestClient(app) as client:
        wait_ready(client)
        yield client


def test_a_plugins_own_method_is_served_through_an_engine_host(hosted) -> None:
    response = hosted.post("/v1/moderations", json={"model": "mod", "input": ["an awful day", "a fine day"]})
    assert response.status_code == 200, response.text
    assert response.json()["results"] == [{"flagged": True, "words": ["awful"]}, {"flagged": False, "words": []}]
    refused = hosted.post("/v1/moderations", json={"model": "mod", "input": ["  "]})  # the engine's own 400
    assert refused.status_code == 400
    assert "empty text" in error_of(refused)["message"]


def test_a_model_whose_engine_lacks_the_method_is_a_400(hosted) -> None:
    response = hosted.post("/v1/moderations", json={"model": "fake-entities", "input": "an awful day"})
    assert response.status_code == 400
    assert error_of(response)["message"] == "the model `fake-entities` does not serve `moderate`"


CONFORMANCE = """
from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import EngineContext, engine_method
from hypnos.testing.conformance import ConformanceTarget
from moderation_plugin import ModerationInput, moderation_kind
import pytest


@pytest.fixture
def conformance_engine(tmp_path):
    model = ModelConfig(id="mod", modality="entity_extraction", engine="moderation")

    async def moderate(engine, cancel):
        return await engine_method(engine, "moderate")(ModerationInput(texts=["a bad one", "fine", "bad"]), cancel)

    async def empty(engine, cancel):
        return await engine_method(engine, "moderate")(ModerationInput(texts=[""]), cancel)

    context = EngineContext(models_dir=tmp_path, limits=LimitsConfig())
    return ConformanceTarget(moderation_kind(), model, context, moderate, bad_request=empty)
"""


def test_a_plugins_own_method_passes_the_conformance_suite(tmp_path: Path) -> None:
    (tmp_path / "test_moderation_conformance.py").write_text(CONFORMANCE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "hypnos.testing.conformance", "-p", "no:cacheprovider"]
    done = subprocess.run([*command, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
