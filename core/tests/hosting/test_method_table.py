"""The one table of engine methods (hypnos.engine_methods) drives every path: the engine base declares its methods and
no others, and the fake engine answers each of them alike in this process and through an engine host."""

from __future__ import annotations

import inspect

import pytest
from host_kit import hosted_model, hosted_scheduler
from hypnos.engine import ENGINE_METHODS, Engine, EngineKind, EngineMethod
from hypnos.engine_methods import LIFECYCLE_METHODS
from hypnos.testing.conformance_target import same_answer
from hypnos.testing.fake_engine import FakeEngine
from hypnos.testing.method_samples import is_result, sample_answer
from hypnos.types import Modality
from sched_kit import fake_model, make_scheduler


def test_the_engine_base_declares_the_tables_methods_and_no_others() -> None:
    declared = {name for name, value in vars(Engine).items() if callable(value) and not name.startswith("_")}
    assert declared - LIFECYCLE_METHODS == {method.name for method in ENGINE_METHODS}
    for method in ENGINE_METHODS:
        streams = not inspect.iscoroutinefunction(getattr(Engine, method.name))
        assert streams == method.streams, method.name


def test_the_fake_engine_implements_every_method() -> None:
    missing = [
        method.name for method in ENGINE_METHODS if getattr(FakeEngine, method.name) is getattr(Engine, method.name)
    ]
    assert missing == []


@pytest.mark.parametrize("method", ENGINE_METHODS, ids=lambda method: method.name)
async def test_every_method_answers_alike_in_this_process_and_through_a_host(method: EngineMethod) -> None:
    local_model = {**fake_model("m", layer_mib=1), "modalities": [m.value for m in Modality]}
    hosted, local = hosted_scheduler([hosted_model("m")]), make_scheduler([local_model])
    try:
        answers = []
        for scheduler in (local, hosted):
            async with scheduler.lease("m", method.modality) as lease:
                answers.append(await sample_answer(lease.engine, method, lease.cancel))
    finally:
        await hosted.shutdown()
        await local.shutdown()
    near, far = answers
    items = far if method.streams else [far]
    assert items and all(is_result(item, method) for item in items), far
    assert same_answer(near, far)


def test_a_kind_may_not_take_a_core_or_lifecycle_name() -> None:
    for name in ("rerank", "load"):
        own = EngineMethod(name, str, str, Modality.EMBEDDINGS)
        with pytest.raises(ValueError, match="already taken"):
            EngineKind("mine", frozenset({Modality.EMBEDDINGS}), FakeEngine, methods=(own,))
    with pytest.raises(ValueError, match="identifier"):
        EngineMethod("not a name", str, str, Modality.EMBEDDINGS)
