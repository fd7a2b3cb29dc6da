"""A model whose load fails: 503 model_not_available with the reason, retried only after a growing, capped backoff."""

from __future__ import annotations

import asyncio

import pytest
from hypnos.config import settings_from_mapping
from hypnos.errors import HypnosError
from hypnos.scheduler.load_backoff import LOAD_BACKOFF_BASE_SECS, LOAD_BACKOFF_MAX_SECS
from hypnos.types import MemoryTier, Modality
from sched_kit import ManualClock, fake_model, make_scheduler

TEXT = Modality.TEXT_GENERATION


async def use(scheduler, model_id: str) -> None:
    async with scheduler.lease(model_id, TEXT):
        pass


async def failure(scheduler, model_id: str = "m") -> HypnosError:
    with pytest.raises(HypnosError) as caught:
        await use(scheduler, model_id)
    return caught.value


def reason(scheduler, model_id: str = "m") -> str | None:
    return next(m for m in scheduler.status().models if m.id == model_id).unavailable_reason


def broken(clock: ManualClock, **extra):  # type: ignore[no-untyped-def]
    return make_scheduler([fake_model("m", fail_load=True, **extra), fake_model("ok")], clock=clock)


async def test_after_a_failed_load_requests_get_503_with_the_reason_and_no_new_load() -> None:
    clock = ManualClock()
    scheduler = broken(clock)
    first = await failure(scheduler)
    assert (first.status, first.type) == (500, "server_error")
    for _ in range(3):
        error = await failure(scheduler)
        assert (error.status, error.type) == (503, "model_not_available")
        assert "fake load failure" in error.message and "/v1/models/m/enable" in error.message
        assert error.response_headers()["Retry-After"] == str(int(LOAD_BACKOFF_BASE_SECS))
    assert scheduler.get("m").load_failures == 1  # the load was not retried
    assert "fake load failure" in (reason(scheduler) or "") and "next try is in 5 s" in (reason(scheduler) or "")
    assert reason(scheduler, "ok") is None
    await use(scheduler, "ok")  # the other model serves meanwhile


async def test_a_library_exception_in_load_leaves_its_text_out_of_the_503(monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler = make_scheduler([fake_model("m"), fake_model("ok")], clock=ManualClock())

    async def raw_failure(plan):  # type: ignore[no-untyped-def]
        raise OSError("/secret/weights.gguf: bad magic 0xdeadbeef")

    monkeypatch.setattr(scheduler.get("m").engine, "load", raw_failure)
    assert (await failure(scheduler)).status == 500
    error = await failure(scheduler)
    assert (error.status, error.type) == (503, "model_not_available")
    for text in (error.message, reason(scheduler) or ""):
        assert "server log" in text and "/secret" not in text and "deadbeef" not in text and "OSError" not in text


async def test_the_load_is_retried_after_a_backoff_that_doubles_up_to_a_cap() -> None:
    clock = ManualClock()
    scheduler = broken(clock)
    await failure(scheduler)
    waits = []
    for attempt in range(2, 12):
        retry_after = int((await failure(scheduler)).response_headers()["Retry-After"])
        waits.append(retry_after)
        clock.advance(retry_after - 1)
        assert (await failure(scheduler)).status == 503  # a second early: still waiting
        clock.advance(1)
        error = await failure(scheduler)
        assert error.status == 500 and scheduler.get("m").load_failures == attempt
    assert waits[:4] == [5, 10, 20, 40]
    assert max(waits) == waits[-1] == LOAD_BACKOFF_MAX_SECS


async def test_requests_queued_behind_the_failing_load_do_not_load_again() -> None:
    clock = ManualClock()
    scheduler = broken(clock, load_ms=30, slots=1)
    results = await asyncio.gather(*(use(scheduler, "m") for _ in range(4)), return_exceptions=True)
    assert all(isinstance(r, HypnosError) for r in results)
    assert scheduler.get("m").load_failures == 1
    assert sorted(r.status for r in results)[-1] == 503  # type: ignore[union-attr]


async def test_an_admin_enable_retries_at_once() -> None:
    clock = ManualClock()
    scheduler = broken(clock)
    await failure(scheduler)
    await scheduler.set_enabled("m", True)
    assert reason(scheduler) is None
    assert (await failure(scheduler)).status == 500
    assert scheduler.get("m").load_failures == 2


async def test_a_good_load_forgets_the_failures() -> None:
    clock = ManualClock()
    scheduler = broken(clock)
    await failure(scheduler)
    await failure(scheduler)
    state = scheduler.get("m")
    state.engine.options.fail_load = False  # the operator fixed the weights file
    clock.advance(LOAD_BACKOFF_BASE_SECS)
    await use(scheduler, "m")
    assert state.tier == MemoryTier.TIER1 and reason(scheduler) is None and state.load_error is None
    await scheduler.move("m", MemoryTier.TIER3)
    state.engine.options.fail_load = True
    await failure(scheduler)
    # the backoff starts again from its base, not from where the earlier failures had left it
    assert (await failure(scheduler)).response_headers()["Retry-After"] == str(int(LOAD_BACKOFF_BASE_SECS))


async def test_a_pool_replace_starts_without_the_backoff() -> None:
    clock = ManualClock()
    scheduler = broken(clock)
    await failure(scheduler)
    fixed = settings_from_mapping({"models": [fake_model("m")]}).models[0]
    await scheduler.pool.replace("m", fixed, drain_secs=1.0)
    assert reason(scheduler) is None
    await use(scheduler, "m")
    assert scheduler.get("m").tier == MemoryTier.TIER1


async def test_no_prefetch_while_backing_off() -> None:
    clock = ManualClock()
    scheduler = broken(clock)
    await failure(scheduler)
    async with scheduler.lease("ok", TEXT, next_model="m"):
        pass
    await asyncio.sleep(0.02)
    assert scheduler.get("m").load_failures == 1
