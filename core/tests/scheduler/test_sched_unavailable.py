"""A model whose engine factory or estimate fails is unavailable with its reason; the server keeps serving."""

from __future__ import annotations

import dataclasses

import pytest
from hypnos.config import ConfigError
from hypnos.engine import EngineUnavailable
from hypnos.hardware import StaticHardware
from hypnos.scheduler import Scheduler
from hypnos.testing import fake_engine_kind
from hypnos.testing.fake_engine import FakeEngine
from hypnos.types import Modality
from sched_kit import fake_model, make_settings


class BadEstimate(FakeEngine):
    """Its estimate raises a plain exception (a broken file header)."""

    def estimate(self):  # type: ignore[no-untyped-def]
        raise KeyError("general.architecture")


def _boom(model, context):  # type: ignore[no-untyped-def]
    raise RuntimeError("the factory broke")


def _scheduler(kinds: dict) -> Scheduler:
    settings = make_settings([fake_model("good"), {**fake_model("bad"), "engine": "broken"}])
    return Scheduler(settings, {"fake": fake_engine_kind(), **kinds}, hardware=StaticHardware())


@pytest.mark.parametrize(
    ("factory", "reason"), [(_boom, "RuntimeError: the factory broke"), (BadEstimate, "general.architecture")]
)
async def test_failing_factory_or_estimate_marks_only_that_model(factory, reason: str) -> None:
    kind = dataclasses.replace(fake_engine_kind(), name="broken", factory=factory)
    scheduler = _scheduler({"broken": kind})
    status = {m.id: m for m in scheduler.status().models}
    assert reason in (status["bad"].unavailable_reason or "")
    assert status["bad"].total_weight_bytes == 0 and status["good"].unavailable_reason is None
    with pytest.raises(EngineUnavailable) as caught:
        scheduler.serving("bad", Modality.TEXT_GENERATION)
    assert caught.value.status == 503 and reason in caught.value.message
    async with scheduler.lease("good", Modality.TEXT_GENERATION) as lease:
        assert (await lease.engine.embed(["x"], lease.cancel)).vectors


def test_bad_option_key_is_a_config_error() -> None:
    settings = make_settings([{**fake_model("m"), "fake": {"layerz": 1}}])
    with pytest.raises(ConfigError, match=r"model `m`: \[models.fake\] key `layerz`"):
        Scheduler(settings, {"fake": fake_engine_kind()}, hardware=StaticHardware())


def test_kv_idle_timeout_reaches_the_engines() -> None:
    settings = make_settings([fake_model("m")], server={"kv_idle_timeout_secs": 90})
    scheduler = Scheduler(settings, {"fake": fake_engine_kind()}, hardware=StaticHardware())
    assert scheduler.get("m").engine.context.kv_idle_timeout_secs == 90
