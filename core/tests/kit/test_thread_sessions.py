"""Sessions per thread count: the share's threads, spinning only alone, made once and kept within the limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypnos.config import ConfigError, LimitsConfig, ModelConfig, ProcessConfig, settings_from_mapping
from hypnos.engine import EngineContext
from hypnos.kit.staged import StagedEngine
from hypnos.kit.thread_sessions import (
    SMALL_SESSION_BYTES,
    SessionKey,
    ThreadSessions,
    session_limit,
    sessions_bytes,
)
from hypnos.types import LayerPlacementPlan, MemoryTier


class Maker:
    """Makes a distinct object per call and records the keys it was asked for."""

    def __init__(self) -> None:
        self.made: list[SessionKey] = []

    def __call__(self, key: SessionKey) -> tuple[SessionKey, int]:
        self.made.append(key)
        return key, len(self.made)


def test_a_share_of_n_cores_runs_on_a_session_of_n_threads() -> None:
    maker = Maker()
    sessions = ThreadSessions(maker, threads=0, spin=True, limit=2)
    assert sessions.session(None, False)[0] == SessionKey(0, True)  # before any share: the configured session
    assert sessions.session(2, True)[0] == SessionKey(2, True)  # alone with 2 cores: 2 threads that may spin
    assert sessions.session(1, False)[0] == SessionKey(1, False)  # sharing the machine: 1 thread, no spinning
    assert sessions.threads(1) == 1 and sessions.threads(None) is None


def test_a_kept_session_is_picked_again_without_making_it() -> None:
    maker = Maker()
    sessions = ThreadSessions(maker, threads=0, spin=True, limit=2)
    first = sessions.session(2, True)
    second = sessions.session(1, False)
    assert sessions.session(2, True) is first and sessions.session(1, False) is second
    assert maker.made == [SessionKey(2, True), SessionKey(1, False)]
    assert sessions.last == SessionKey(1, False)


def test_sessions_are_bounded_least_recently_used_first() -> None:
    maker = Maker()
    sessions = ThreadSessions(maker, threads=0, spin=True, limit=2)
    for threads in (1, 2, 1, 3):
        sessions.session(threads, False)
    assert sessions.keys() == [SessionKey(1, False), SessionKey(3, False)]  # 2 was the least recently used
    sessions.clear()
    assert sessions.keys() == [] and sessions.last is None


def test_configured_threads_cap_the_share_and_a_session_that_never_spins_stays_so() -> None:
    sessions = ThreadSessions(Maker(), threads=2, spin=False, limit=3)
    assert sessions.key(8, True) == SessionKey(2, False)
    assert sessions.key(1, True) == SessionKey(1, False)


def test_one_session_keeps_the_configured_one_whatever_the_share() -> None:
    maker = Maker()
    sessions = ThreadSessions(maker, threads=4, spin=True, limit=1)
    assert sessions.session(1, False) is sessions.session(2, True)
    assert maker.made == [SessionKey(4, True)]


def _model(**process: Any) -> ModelConfig:
    return ModelConfig(id="m", modality="embeddings", engine="x", process=ProcessConfig(**process))


def test_the_limit_is_the_config_else_two_for_a_small_session_and_one_off_the_cpu() -> None:
    assert session_limit(_model(), SMALL_SESSION_BYTES, "cpu") == 2
    assert session_limit(_model(), SMALL_SESSION_BYTES + 1, "cpu") == 1
    assert session_limit(_model(thread_sessions=3), SMALL_SESSION_BYTES + 1, "auto", "cpu") == 3
    assert session_limit(_model(thread_sessions=3), 10, "cuda") == 1
    assert session_limit(_model(thread_sessions=3), 10, "auto", "NVIDIA H100 (CUDA 12.4)") == 1
    assert sessions_bytes(100, 50, 2) == 250 and sessions_bytes(100, 50, 1) == 100


def test_thread_sessions_below_one_is_a_config_error() -> None:
    model = {"id": "m", "modality": "embeddings", "engine": "x", "process": {"thread_sessions": 0}}
    with pytest.raises(ConfigError, match="thread_sessions"):
        settings_from_mapping({"models": [model]})


class Sessions(StagedEngine):
    """A staged engine whose build keeps sessions per thread count."""

    def build(self, plan: LayerPlacementPlan) -> None:
        self.thread_sessions = ThreadSessions(Maker(), threads=0, spin=True, limit=2)


async def test_a_staged_engine_with_sessions_reports_the_threads_of_its_next_session(tmp_path: Path) -> None:
    engine = Sessions(_model(), EngineContext(models_dir=tmp_path, limits=LimitsConfig()))
    await engine.load(LayerPlacementPlan(primary_tier=MemoryTier.TIER1))
    try:
        assert await engine.follow_cores([0, 1], alone=True) == 2
        assert engine.core_alone
        assert await engine.follow_cores([1]) == 1
        assert not engine.core_alone
    finally:
        await engine.unload()
