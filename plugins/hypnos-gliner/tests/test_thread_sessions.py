"""GLiNER on ONNX Runtime follows its core share: each call runs on a session made for the share's thread count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypnos.engine import CancelToken, EntityInput
from hypnos.kit.thread_sessions import SessionKey
from hypnos.types import LayerPlacementPlan, MemoryTier

from .test_engine import LABELS, TEXTS, make_engine

pytestmark = pytest.mark.model


def threads_of(runner: Any) -> tuple[int, str]:
    """The intra-op threads and spin setting of a runner's ONNX Runtime session."""
    options = runner.model.model.session.get_session_options()
    return options.intra_op_num_threads, options.get_session_config_entry("session.intra_op.allow_spinning")


async def spans(engine: Any) -> list[list[tuple[int, int, str]]]:
    result = await engine.extract_entities(EntityInput(texts=TEXTS, labels=LABELS, threshold=0.5), CancelToken())
    return [[(e.start, e.end, e.label) for e in found] for found in result.entities]


async def test_onnx_runs_each_call_on_the_session_of_its_share(models_dir: Path) -> None:
    engine = make_engine(models_dir, "onnx")
    await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
    try:
        assert await engine.follow_cores([0]) == 1
        assert len(await spans(engine)) == len(TEXTS)
        one = engine._runner
        assert threads_of(one) == (1, "0")
        assert await engine.follow_cores([0, 1], alone=True) == 2
        assert len(await spans(engine)) == len(TEXTS)
        two = engine._runner
        assert two is not one and threads_of(two) == (2, "0")  # GLiNER's sessions never spin (its measured choice)
        assert engine.thread_sessions is not None
        assert engine.thread_sessions.keys() == [SessionKey(1, False), SessionKey(2, False)]
    finally:
        await engine.unload()
