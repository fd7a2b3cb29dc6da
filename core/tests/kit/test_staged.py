"""StagedEngine: the hooks each tier move calls, their order on the worker thread, and the one not-loaded error."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import msgspec
import pytest
from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import EngineContext
from hypnos.kit.staged import ModelNotLoaded, StagedEngine
from hypnos.kit.worker import ModelWorker
from hypnos.types import LayerPlacementPlan, MemoryTier


class Opts(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A test option table."""

    size: int = 3


class Recorder(StagedEngine):
    """Records every hook call and the thread it ran on."""

    options_table = "rec"
    options_type = Opts

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self.threads: set[str] = set()

    def _note(self, name: str) -> None:
        self.calls.append(name)
        self.threads.add(threading.current_thread().name)

    def read_weights(self) -> None:
        self._note("read")

    def build(self, plan: LayerPlacementPlan) -> None:
        self._note("build")
        self.device = "cuda"

    def release_device(self) -> None:
        self._note("release_device")

    def release_warm(self) -> None:
        self._note("release_warm")

    async def work(self) -> str:
        self.require_ready()
        return await self.run_blocking(lambda: threading.current_thread().name)


def _engine(tmp_path: Path, **tables) -> Recorder:
    model = ModelConfig(id="m", modality="embeddings", engine="rec", engine_options=tables)
    return Recorder(model, EngineContext(models_dir=tmp_path, limits=LimitsConfig()))


def plan(tier: MemoryTier) -> LayerPlacementPlan:
    return LayerPlacementPlan(primary_tier=tier)


async def test_tier_walk_calls_each_hook_once_per_move(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    phases = await engine.load(plan(MemoryTier.TIER2))
    assert engine.calls == ["read"] and phases.total_ms is not None
    await engine.load(plan(MemoryTier.TIER1))
    assert engine.calls == ["read", "build"] and engine.device == "cuda"
    await engine.demote(MemoryTier.TIER2)
    assert engine.calls[-1] == "release_device" and engine.device == "cpu"
    await engine.load(plan(MemoryTier.TIER1))
    await engine.unload()
    assert engine.calls == ["read", "build", "release_device", "build", "release_device", "release_warm"]
    assert len(engine.threads) == 1 and next(iter(engine.threads)).startswith("rec-m")


async def test_load_straight_to_tier1_and_again_is_a_no_op(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    await engine.load(plan(MemoryTier.TIER1))
    await engine.load(plan(MemoryTier.TIER1))
    assert engine.calls == ["read", "build"]
    await engine.load(plan(MemoryTier.TIER2))  # a load to a lower tier moves down
    assert engine.calls == ["read", "build", "release_device"]


async def test_not_loaded_is_503_model_not_available(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with pytest.raises(ModelNotLoaded) as caught:
        await engine.work()
    assert (caught.value.status, caught.value.type) == (503, "model_not_available")
    await engine.load(plan(MemoryTier.TIER1))
    assert (await engine.work()).startswith("rec-m")
    await engine.demote(MemoryTier.TIER3)
    with pytest.raises(ModelNotLoaded):
        await engine.work()


async def test_build_consuming_warm_copy_rereads_on_move_to_tier2(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    engine.build_consumes_warm_copy = True
    await engine.load(plan(MemoryTier.TIER1))
    await engine.demote(MemoryTier.TIER2)
    assert engine.calls == ["read", "build", "release_device", "read"]


async def test_failed_build_keeps_warm_copy_and_retries_build(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    original = engine.build
    engine.build = lambda plan: (_ for _ in ()).throw(RuntimeError("no device"))  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await engine.load(plan(MemoryTier.TIER1))
    engine.build = original  # type: ignore[method-assign]
    await engine.load(plan(MemoryTier.TIER1))
    assert engine.calls == ["read", "build"]


async def test_demote_waits_for_the_running_request_call(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    await engine.load(plan(MemoryTier.TIER1))
    gate = threading.Event()
    running = engine.worker.submit(lambda: (gate.wait(5), engine.calls.append("request"))[1])
    demote = asyncio.ensure_future(engine.demote(MemoryTier.TIER3))
    await asyncio.sleep(0.05)
    assert not demote.done()
    gate.set()
    await asyncio.gather(running, demote)
    assert engine.calls[-3:] == ["request", "release_device", "release_warm"]


def test_options_decoded_from_the_table(tmp_path: Path) -> None:
    assert _engine(tmp_path, rec={"size": 7}).options == Opts(size=7)
    assert _engine(tmp_path).options == Opts()


async def test_worker_restarts_after_close() -> None:
    worker = ModelWorker("w")
    assert (await worker.run(lambda: threading.current_thread().name)).startswith("w")
    worker.close()
    assert await worker.run(lambda x: x + 1, 41) == 42
    worker.close()


async def test_build_phases_refine_a_load_that_built(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    engine.build_phases = lambda phases: msgspec.structs.replace(phases, projector_ms=5.0)  # type: ignore[method-assign]
    assert (await engine.load(plan(MemoryTier.TIER2))).projector_ms is None
    assert (await engine.load(plan(MemoryTier.TIER1))).projector_ms == 5.0
    assert (await engine.load(plan(MemoryTier.TIER1))).projector_ms is None  # already built: nothing to refine


class FakeTorch:
    """torch's thread setting as each thread sees it (OpenMP keeps the count per thread)."""

    def __init__(self, threads: int) -> None:
        self.default = threads
        self.by_thread: dict[str, int] = {}

    def get_num_threads(self) -> int:
        return self.by_thread.get(threading.current_thread().name, self.default)

    def set_num_threads(self, threads: int) -> None:
        self.by_thread[threading.current_thread().name] = threads


async def test_torch_follows_the_core_share_on_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = FakeTorch(threads=4)
    monkeypatch.setitem(sys.modules, "torch", torch)
    engine = _engine(tmp_path)
    await engine.load(plan(MemoryTier.TIER1))
    try:
        assert await engine.follow_cores([2]) == 1
        worker = await engine.work()
        assert torch.by_thread[worker] == 1  # the next call computes with the share's one thread
        assert await engine.follow_cores([0, 1, 2, 3, 4, 5]) == 4  # never above torch's own count
        await engine.work()
        assert torch.by_thread[worker] == 4
    finally:
        await engine.unload()
