"""The engine itself: the kit's conformance suite (torch and ONNX Runtime), the estimate, batching, cancellation."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
from hypnos.config import ModelConfig, settings_from_mapping
from hypnos.engine import CancelToken, EngineContext, EntityInput
from hypnos.errors import HypnosError
from hypnos.testing.conformance import ConformanceTarget, MissingLibrary
from hypnos.types import LayerPlacementPlan, MemoryTier
from hypnos_gliner import plugin
from hypnos_gliner.engine import GlinerEngine

pytest_plugins = ["hypnos.testing.conformance"]
pytestmark = pytest.mark.model

LABELS = ["person", "city", "company", "product"]
TEXTS = ["Mario Rossi works in Milan for Ferrari.", "Tim Cook announced the iPhone 17 in Cupertino."]


def model_and_context(
    models_dir: Path, runtime: str, batch: int | None = None, process: dict[str, Any] | None = None, **options: Any
) -> tuple[ModelConfig, EngineContext]:
    """The tiny model served by one runtime (`batch` passes per call, `process` its [models.process]), and an engine
    context."""
    table = {"id": f"tiny-{runtime}", "modality": "entity_extraction", "engine": "gliner",
             "weights_path": "gliner-tiny", "gliner": {"runtime": runtime, **options}}  # fmt: skip
    if process is not None:
        table["process"] = process
    if batch is not None:
        table["batching"] = {"max_batch_size": batch}
    settings = settings_from_mapping({"models_dir": str(models_dir), "models": [table]})
    return settings.models[0], EngineContext(models_dir=settings.models_path, limits=settings.limits)


async def extract(engine: Any, cancel: CancelToken) -> Any:
    """Two texts (two passes: the cancel token is checked at each step)."""
    return await engine.extract_entities(EntityInput(texts=TEXTS, labels=LABELS, threshold=0.5), cancel)


async def extract_others(engine: Any, cancel: CancelToken) -> Any:
    """Other texts and labels (the concurrency checks send them with `extract`)."""
    job = EntityInput(texts=[TEXTS[1], "Angela Merkel met Emmanuel Macron in Paris."], labels=LABELS[:3], threshold=0.4)
    return await engine.extract_entities(job, cancel)


async def no_labels(engine: Any, cancel: CancelToken) -> Any:
    """A request the engine must refuse (400)."""
    return await engine.extract_entities(EntityInput(texts=TEXTS, labels=[], threshold=0.5), cancel)


@pytest.fixture(params=["onnx", "torch"])
def conformance_engine(request: pytest.FixtureRequest, models_dir: Path) -> ConformanceTarget:
    """The tiny GLiNER on ONNX Runtime and on torch."""
    model, context = model_and_context(models_dir, request.param)
    kind = plugin.hypnos_engine_kinds()[0]
    if request.param == "onnx":
        missing = MissingLibrary("onnxruntime", modules=("onnxruntime",), distributions=("onnxruntime",))
    else:
        missing = MissingLibrary("gliner", modules=("gliner",), distributions=("gliner",))
    return ConformanceTarget(kind, model, context, extract, bad_request=no_labels, variants=[extract_others, extract],
                             missing_library=missing)  # fmt: skip


def make_engine(
    models_dir: Path, runtime: str, batch: int | None = None, process: dict[str, Any] | None = None, **options: Any
) -> GlinerEngine:
    """A fresh engine (tier 3)."""
    model, context = model_and_context(models_dir, runtime, batch, process, **options)
    return GlinerEngine(model, context)


def test_estimate_reads_the_weights_headers(models_dir: Path) -> None:
    from safetensors import safe_open

    with safe_open(models_dir / "gliner-tiny" / "model.safetensors", framework="pt") as weights:
        tensor_bytes = sum(math.prod(weights.get_slice(name).get_shape()) * 4 for name in weights.keys())
    torch_estimate = make_engine(models_dir, "torch").estimate()
    assert torch_estimate.weight_bytes == tensor_bytes
    onnx_estimate = make_engine(models_dir, "onnx").estimate()
    onnx_bytes = (models_dir / "gliner-tiny" / "model.onnx").stat().st_size
    assert onnx_estimate.weight_bytes == 3 * onnx_bytes  # two sessions per thread count and the bytes they come from
    one_session = make_engine(models_dir, "onnx", process={"thread_sessions": 1}).estimate()
    assert one_session.weight_bytes == onnx_bytes
    assert torch_estimate.workspace_bytes > 0
    assert make_engine(models_dir, "torch", batch=16).estimate().workspace_bytes > torch_estimate.workspace_bytes


def test_concurrent_requests_share_batches(models_dir: Path) -> None:
    engine = make_engine(models_dir, "torch", batch=8)
    texts = [f"{TEXTS[i % 2]} Number {i} of many." for i in range(8)]

    async def walk() -> tuple[list[Any], list[Any], int]:
        await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
        alone = []
        for text in texts:
            alone.append(await engine.extract_entities(EntityInput(texts=[text], labels=LABELS), CancelToken()))
        before = engine.batcher.batches_run
        jobs = [engine.extract_entities(EntityInput(texts=[text], labels=LABELS), CancelToken()) for text in texts]
        together = await asyncio.gather(*jobs)
        batches = engine.batcher.batches_run - before
        await engine.unload()
        return alone, together, batches

    alone, together, batches = asyncio.run(walk())
    assert batches < len(texts) and engine.batcher.largest_batch > 1
    for one, other in zip(alone, together, strict=True):
        assert [(e.start, e.end, e.label) for e in one.entities[0]] == [(e.start, e.end, e.label)
                                                                        for e in other.entities[0]]  # fmt: skip


class CancelAfter(CancelToken):
    """A token that turns cancelled at its `after`+1-th check."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.checks = after, 0

    @property
    def cancelled(self) -> bool:
        """Counted; True from check after+1 on."""
        self.checks += 1
        if self.checks > self.after:
            self.cancel()
        return super().cancelled


def test_a_cancelled_request_stops_between_batches(models_dir: Path) -> None:
    engine = make_engine(models_dir, "onnx", batch=1)
    long = " ".join(["Mario Rossi works in Milan for Ferrari."] * 400)  # 2,400 words: several windows

    async def walk() -> int:
        await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
        before = engine.batcher.batches_run
        # checked at the start, when queued, and before the first batch: cancelled before the second
        with pytest.raises(HypnosError) as caught:
            await engine.extract_entities(EntityInput(texts=[long], labels=LABELS), CancelAfter(3))
        assert caught.value.status == 499
        ran = engine.batcher.batches_run - before
        served = await engine.extract_entities(EntityInput(texts=TEXTS, labels=LABELS), CancelToken())
        assert len(served.entities) == 2
        await engine.unload()
        return ran

    assert asyncio.run(walk()) == 1, "the passes left were dropped at the next batch"


def test_one_label_set_per_batch_answers_the_same(models_dir: Path) -> None:
    """The path for models taking one label set per batch (bi-encoder ONNX graphs) gives the per-row answer."""
    engine = make_engine(models_dir, "onnx", labels_per_pass=2)
    job = EntityInput(texts=TEXTS, labels=LABELS, threshold=0.5, flat=False)

    async def walk() -> tuple[Any, Any]:
        await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
        per_row = await engine.extract_entities(job, CancelToken())
        engine._runner.shared_labels_only = True  # type: ignore[union-attr]
        grouped = await engine.extract_entities(job, CancelToken())
        await engine.unload()
        return per_row, grouped

    per_row, grouped = asyncio.run(walk())
    assert any(per_row.entities)
    for one, other in zip(per_row.entities, grouped.entities, strict=True):
        assert [(e.start, e.end, e.label) for e in one] == [(e.start, e.end, e.label) for e in other]
        assert [e.score for e in one] == pytest.approx([e.score for e in other], abs=1e-4)


def test_the_deprecated_gliner_batch_size_still_sizes_the_batches(models_dir: Path) -> None:
    model, context = model_and_context(models_dir, "onnx", batch_size=3)  # [models.gliner] batch_size, as before
    assert GlinerEngine(model, context).batcher.limits.max_batch_size == 3
    model, context = model_and_context(models_dir, "onnx", batch=5, batch_size=3)  # the new table wins
    assert GlinerEngine(model, context).batcher.limits.max_batch_size == 5
