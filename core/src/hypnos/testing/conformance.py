"""The engine conformance suite, as a pytest plugin any engine plugin runs against its own small model.

Enable it with `pytest -p hypnos.testing.conformance` (or `pytest_plugins = ["hypnos.testing.conformance"]` in the
tests' top conftest.py), then define, in a test module, a fixture `conformance_engine` returning a ConformanceTarget:
the suite's tests are collected into that module as `TestConformance`. No pytest-asyncio needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.abc
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from hypnos.config import ModelConfig
from hypnos.engine import CancelToken, Engine, EngineContext, EngineKind, EngineUnavailable, EntityInput, ImageInput
from hypnos.errors import HypnosError
from hypnos.testing.clean_errors import assert_clean_message
from hypnos.types import LayerPlacementPlan, MemoryTier, Modality

MiB = 1024 * 1024
Request = Callable[[Engine, CancelToken], Awaitable[Any]]
# The error types of the spec (section 1); a 499 `cancelled` is what an engine may raise for a cancelled request.
SPEC_ERROR_TYPES = {
    "invalid_request_error", "authentication_error", "permission_error", "model_not_found", "model_disabled",
    "not_found", "model_busy", "rate_limit_exceeded", "insufficient_quota", "model_not_available",
    "deadline_unmeetable", "device_out_of_memory", "insufficient_memory", "server_error", "cancelled",
}  # fmt: skip


@dataclass(frozen=True)
class MissingLibrary:
    """How to make the engine's library look absent: modules to hide, distributions to hide, the package the
    error must name (as hypnos.engine.missing_library writes it)."""

    package: str
    modules: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()


@dataclass
class ConformanceTarget:
    """What the suite needs: the engine kind, one model of it, the context, and one small request.

    `request(engine, cancel)` serves one request at tier 1 and returns its result (a streaming method: collect the
    stream). It must check the cancel token at two steps or more (several tokens, phrases, segments or inputs).
    `bad_request` sends input the engine must refuse with a 400. Memory: the RSS growth of a load to tier 1 plus
    one request must be at most the estimate x (1 + memory_tolerance) + memory_slack_bytes, and the estimate at
    most memory_over_factor x the growth + memory_slack_bytes.
    """

    kind: EngineKind
    model_config: ModelConfig
    context: EngineContext
    request: Request
    bad_request: Request | None = None
    missing_library: MissingLibrary | None = None
    memory_tolerance: float = 0.25
    memory_over_factor: float = 4.0
    memory_slack_bytes: int = 96 * MiB
    tier1_gpu_layers: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def make(self) -> Engine:
        """A fresh engine (tier 3) from the kind's factory."""
        return self.kind.factory(self.model_config, self.context)

    def plan(self, engine: Engine, tier: MemoryTier) -> LayerPlacementPlan:
        """The plan the scheduler would give: everything on the device at tier 1 when there is one."""
        if tier != MemoryTier.TIER1:
            return LayerPlacementPlan(primary_tier=tier)
        layers = self.tier1_gpu_layers
        if layers is None:
            layers = engine.estimate().num_layers if self.context.accelerator == "NvidiaCuda" else 0
        return LayerPlacementPlan(primary_tier=tier, gpu_layers=layers)


class CountingToken(CancelToken):
    """A cancel token that counts the engine's checks and cancels itself after `after` of them."""

    def __init__(self, after: int | None = None) -> None:
        super().__init__()
        self.after = after
        self.checks = 0
        self.checks_after_cancel = 0

    @property
    def cancelled(self) -> bool:
        """Counted; True from the check after `after` checks on."""
        self.checks += 1
        if self.after is not None and self.checks > self.after:
            self.checks_after_cancel += 1
            self.cancel()
        return super().cancelled


def resident_bytes() -> int:
    """This process's resident set size (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _Hidden(importlib.abc.MetaPathFinder):
    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def hides(self, name: str) -> bool:
        return any(name == hidden or name.startswith(hidden + ".") for hidden in self.names)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if self.hides(name):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None


@contextlib.contextmanager
def hidden_library(missing: MissingLibrary) -> Iterator[None]:
    """Make the modules and distributions look uninstalled (restored afterwards)."""
    finder = _Hidden(missing.modules)
    saved = {name: module for name, module in sys.modules.items() if finder.hides(name)}
    for name in saved:
        del sys.modules[name]
    real_find_spec, real_distribution = importlib.util.find_spec, importlib.metadata.distribution

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if finder.hides(name) else real_find_spec(name, package)

    def distribution(name: str) -> Any:
        if name in missing.distributions:
            raise importlib.metadata.PackageNotFoundError(name)
        return real_distribution(name)

    sys.meta_path.insert(0, finder)
    importlib.util.find_spec, importlib.metadata.distribution = find_spec, distribution  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        importlib.util.find_spec, importlib.metadata.distribution = real_find_spec, real_distribution
        sys.modules.update(saved)


def assert_spec_error(error: HypnosError, status: int | None = None) -> None:
    """The error has a documented status and type and encodes to the spec's body."""
    body = msgspec.json.decode(msgspec.json.encode(error.body()))
    assert set(body) == {"error"} and isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["type"] in SPEC_ERROR_TYPES, body
    assert 400 <= error.status < 600
    assert_clean_message(error.message)
    if status is not None:
        assert error.status == status, (error.status, error.message)


def _unsupported_call(kind: EngineKind) -> Callable[[Engine], Awaitable[Any]] | None:
    """A call of a modality the kind does not serve (which must be a 400)."""
    token = CancelToken()
    calls: list[tuple[Modality, Callable[[Engine], Awaitable[Any]]]] = [
        (Modality.ENTITY_EXTRACTION, lambda e: e.extract_entities(EntityInput(texts=["a"], labels=["b"]), token)),
        (Modality.IMAGE_GENERATION, lambda e: e.generate_images(ImageInput(prompt="a"), token)),
        (Modality.EMBEDDINGS, lambda e: e.embed(["a"], token)),
    ]
    return next((call for modality, call in calls if modality not in kind.modalities), None)


class ConformanceSuite:
    """The checks every engine passes; collected as `TestConformance` next to a `conformance_engine` fixture."""

    def test_estimate_covers_measured_memory(self, conformance_engine: ConformanceTarget) -> None:
        """The RSS growth of a load to tier 1 and one request (after a first round imported the library) stays within
        the estimate (CPU engines)."""
        target = conformance_engine
        engine = target.make()
        estimate = engine.estimate()
        booked = estimate.weight_bytes + estimate.projector_bytes + estimate.workspace_bytes
        booked += estimate.kv_bytes_per_token * estimate.default_context_len
        if resident_bytes() == 0:
            pytest.skip("no resident-set figure on this platform")

        async def walk() -> tuple[int, int]:
            # the first round also imports the engine's library; the second grows by the model alone
            gc.collect()
            start = resident_bytes()
            await engine.load(target.plan(engine, MemoryTier.TIER1))
            await target.request(engine, CancelToken())
            gc.collect()
            first = resident_bytes() - start
            await engine.unload()
            gc.collect()
            before = resident_bytes()
            await engine.load(target.plan(engine, MemoryTier.TIER1))
            await target.request(engine, CancelToken())
            gc.collect()
            grown = resident_bytes() - before
            await engine.unload()
            return first, grown

        first, grown = asyncio.run(walk())
        if getattr(engine, "device", "cpu") != "cpu":
            pytest.skip("the model ran on a device; its memory is not in the resident set")
        # the model may not outgrow its estimate (the library's own import is not the model's) ...
        assert grown <= booked * (1 + target.memory_tolerance) + target.memory_slack_bytes, (grown, booked)
        # ... and the estimate may cover the library too (in an engine host it is the model's), but no more
        assert booked <= max(first, grown) * target.memory_over_factor + target.memory_slack_bytes, (first, booked)

    def test_tier_walk_serves_at_tier1_only(
        self, conformance_engine: ConformanceTarget, make: Callable[[ConformanceTarget], Engine] | None = None
    ) -> None:
        """3 -> 2 -> 1 -> 2 -> 1 -> 3: a request is served at tier 1 and refused (503) below it."""
        target = conformance_engine
        engine = make(target) if make is not None else target.make()

        async def refused() -> None:
            with pytest.raises(HypnosError) as caught:
                await target.request(engine, CancelToken())
            assert_spec_error(caught.value, 503)
            assert caught.value.type == "model_not_available"

        async def served() -> None:
            assert await target.request(engine, CancelToken()) is not None

        async def walk() -> None:
            await refused()
            await engine.load(target.plan(engine, MemoryTier.TIER2))
            await refused()
            await engine.load(target.plan(engine, MemoryTier.TIER1))
            await served()
            await engine.demote(MemoryTier.TIER2)
            await refused()
            await engine.load(target.plan(engine, MemoryTier.TIER1))
            await served()
            await engine.demote(MemoryTier.TIER3)
            await refused()
            await engine.unload()

        asyncio.run(walk())

    def test_cancellation_stops_at_the_next_step(self, conformance_engine: ConformanceTarget) -> None:
        """A token cancelled after the first step ends the request at its next check; the engine serves on."""
        target = conformance_engine
        engine = target.make()

        async def walk() -> tuple[CountingToken, CountingToken]:
            await engine.load(target.plan(engine, MemoryTier.TIER1))
            full = CountingToken()
            await target.request(engine, full)
            cut = CountingToken(after=1)
            try:
                await target.request(engine, cut)
            except HypnosError as error:
                assert_spec_error(error)
            assert await target.request(engine, CancelToken()) is not None
            await engine.unload()
            return full, cut

        full, cut = asyncio.run(walk())
        assert full.checks >= 2, f"the request checked its cancel token {full.checks} time(s); give a longer one"
        assert cut.checks < full.checks and cut.checks_after_cancel <= 2, (cut.checks, full.checks)

    def test_errors_have_the_spec_shape(
        self, conformance_engine: ConformanceTarget, make: Callable[[ConformanceTarget], Engine] | None = None
    ) -> None:
        """Bad input is a 400, an unserved modality a 400, each in the spec's error body."""
        target = conformance_engine
        engine = make(target) if make is not None else target.make()
        unsupported = _unsupported_call(target.kind)

        async def walk() -> None:
            await engine.load(target.plan(engine, MemoryTier.TIER1))
            try:
                if target.bad_request is not None:
                    with pytest.raises(HypnosError) as caught:
                        await target.bad_request(engine, CancelToken())
                    assert_spec_error(caught.value, 400)
                if unsupported is not None:
                    with pytest.raises(HypnosError) as caught:
                        await unsupported(engine)
                    assert_spec_error(caught.value, 400)
            finally:
                await engine.unload()

        asyncio.run(walk())

    def test_missing_library_names_the_package(self, conformance_engine: ConformanceTarget) -> None:
        """With the engine library absent, the factory, estimate or load raises 503 naming what to install."""
        target = conformance_engine
        if target.missing_library is None:
            pytest.skip("the target names no engine library")
        missing = target.missing_library

        async def attempt() -> None:
            engine = target.make()
            engine.estimate()
            try:
                await engine.load(target.plan(engine, MemoryTier.TIER1))
            finally:
                await engine.unload()

        with hidden_library(missing), pytest.raises(EngineUnavailable) as caught:
            asyncio.run(attempt())
        assert_spec_error(caught.value, 503)
        assert f"`{missing.package}` is not installed" in caught.value.message


def hosted(target: ConformanceTarget, cancel_grace_secs: float | None = None) -> Engine:
    """A fresh engine of the target in an engine host process (isolation "process"), as the scheduler makes it."""
    from hypnos.hosting import HostedEngine, host_factory_path

    path = host_factory_path(target.kind.factory)
    assert path is not None, "the kind's factory must be a module-level function or class: a host imports it"
    model = target.model_config
    if cancel_grace_secs is not None:
        process = msgspec.structs.replace(model.process, cancel_grace_secs=cancel_grace_secs)
        model = msgspec.structs.replace(model, process=process)
    return HostedEngine(model, target.context, target.kind, path)


class HostedConformanceSuite:
    """The same engine in an engine host process: tiers, errors and cancellation through the host's socket, and the
    host ends at tier 3. Collected as `TestConformanceInHost` next to `conformance_engine`."""

    def test_tier_walk_in_a_host(self, conformance_engine: ConformanceTarget) -> None:
        """3 -> 2 -> 1 -> 2 -> 1 -> 3 in a host: served at tier 1, 503 below it, no host left at tier 3."""
        ConformanceSuite.test_tier_walk_serves_at_tier1_only(self, conformance_engine, make=hosted)  # type: ignore[arg-type]

    def test_errors_have_the_spec_shape_in_a_host(self, conformance_engine: ConformanceTarget) -> None:
        """Bad input and unserved modalities answer 400 in the spec's body through the host."""
        ConformanceSuite.test_errors_have_the_spec_shape(self, conformance_engine, make=hosted)  # type: ignore[arg-type]

    def test_a_cancellation_reaches_the_host(self, conformance_engine: ConformanceTarget) -> None:
        """A request cancelled while it runs in the host ends (a result or a spec error), the host is not killed for
        it, and the engine serves the next request."""
        target = conformance_engine
        # the relay is checked here, not the watchdog (its own tests): a busy machine may take long to the next check
        engine = hosted(target, cancel_grace_secs=300)

        async def walk() -> None:
            await engine.load(target.plan(engine, MemoryTier.TIER1))
            pid = engine.process_info().pid  # type: ignore[attr-defined]
            token = CancelToken()
            running = asyncio.ensure_future(target.request(engine, token))
            await asyncio.sleep(0.01)
            token.cancel()
            try:
                await asyncio.wait_for(running, 60)
            except HypnosError as error:
                assert_spec_error(error)
            assert await target.request(engine, CancelToken()) is not None
            assert engine.process_info().pid == pid  # type: ignore[attr-defined]
            await engine.unload()
            assert engine.process_info() is None  # type: ignore[attr-defined]

        asyncio.run(walk())


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> Any:
    """Collect the suites as `TestConformance` and `TestConformanceInHost` in every test module that defines
    `conformance_engine`."""
    if name == "conformance_engine" and isinstance(collector, pytest.Module):
        collector.obj.TestConformance = ConformanceSuite  # a Class collector reads its class from the module
        collector.obj.TestConformanceInHost = HostedConformanceSuite
        return [
            pytest.Class.from_parent(collector, name="TestConformance"),
            pytest.Class.from_parent(collector, name="TestConformanceInHost"),
        ]
    return None
