"""The engine conformance suite, as a pytest plugin any engine plugin runs against its own small model.

Enable it with `pytest -p hypnos.testing.conformance` (or `pytest_plugins = ["hypnos.testing.conformance"]` in the
tests' top conftest.py), then define, in a test module, a fixture `conformance_engine` returning a ConformanceTarget:
the suite's tests are collected into that module as `TestConformance`. No pytest-asyncio needed.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hypnos.engine import CancelToken, Engine, EngineKind, EngineUnavailable, EntityInput, ImageInput
from hypnos.errors import HypnosError
from hypnos.testing.conformance_cases import RequestCases, check_concurrent_answers
from hypnos.testing.conformance_target import (  # noqa: F401  the names a plugin's tests import from here
    ConformanceTarget,
    CountingToken,
    EmbeddingFacts,
    EngineWitness,
    MiB,
    MissingLibrary,
    assert_spec_error,
    described,
    hidden_library,
    refusal,
    resident_bytes,
)
from hypnos.types import MemoryTier, Modality


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
    """The checks every engine passes; collected with RequestCases as `TestConformance` next to a
    `conformance_engine` fixture."""

    def test_estimate_covers_measured_memory(self, conformance_engine: ConformanceTarget) -> None:
        """The RSS growth of a load to tier 1 and one request (after a first round imported the library) stays within
        the estimate (CPU engines). That the estimate is not inflated is checked in a host (TestConformanceInHost),
        whose process always imports the library afresh, whatever ran in this one before."""
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
        # the model may not outgrow its estimate (the library's own import is not the model's)
        allowed = booked * (1 + target.memory_tolerance) + target.memory_slack_bytes
        assert grown <= allowed, (
            f"a load to tier 1 and one request grew the resident set by {grown / MiB:.0f} MiB (the first round: "
            f"{first / MiB:.0f} MiB); the estimate books {booked / MiB:.0f} MiB, which allows {allowed / MiB:.0f}"
        )

    def test_tier_walk_serves_at_tier1_only(
        self, conformance_engine: ConformanceTarget, make: Callable[[ConformanceTarget], Engine] | None = None
    ) -> None:
        """3 -> 2 -> 1 -> 2 -> 1 -> 3: a request is served at tier 1 and refused (503) below it."""
        target = conformance_engine
        engine = make(target) if make is not None else target.make()

        async def refused() -> None:
            error = await refusal(target.request(engine, CancelToken()), "a 503 model_not_available below tier 1")
            assert_spec_error(error, 503)
            assert error.type == "model_not_available", f"expected model_not_available, the engine raised {error.type}"

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
        assert cut.checks < full.checks, (
            f"cancelled at its first check, the request went on to {cut.checks} checks ({full.checks} uncancelled): "
            "expected it to stop at its next check"
        )
        assert cut.checks_after_cancel <= 2, (
            f"the request checked its cancelled token {cut.checks_after_cancel} times; expected it to stop at once"
        )

    def test_errors_have_the_spec_shape(
        self, conformance_engine: ConformanceTarget, make: Callable[[ConformanceTarget], Engine] | None = None
    ) -> None:
        """Bad input is a 400 the engine raises itself, an unserved modality a 400, each in the spec's error body."""
        target = conformance_engine
        engine = make(target) if make is not None else target.make()
        unsupported = _unsupported_call(target.kind)

        async def walk() -> None:
            await engine.load(target.plan(engine, MemoryTier.TIER1))
            try:
                if target.bad_request is not None:
                    witness = EngineWitness(engine, target.kind)
                    bad = target.bad_request(witness, CancelToken())  # type: ignore[arg-type]
                    error = await refusal(bad, "a 400 for the target's bad_request")
                    assert_spec_error(error, 400)
                    assert witness.refused(error), (
                        "the 400 did not come out of the engine: it must refuse bad input itself"
                    )
                if unsupported is not None:
                    error = await refusal(unsupported(engine), "a 400 for a modality the kind does not serve")
                    assert_spec_error(error, 400)
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

        with hidden_library(missing):
            try:
                asyncio.run(attempt())
            except EngineUnavailable as error:
                caught = error
            else:
                raise AssertionError(
                    f"expected a 503 naming `{missing.package}` with it hidden; the engine was built, estimated and "
                    "loaded without it"
                )
        assert_spec_error(caught, 503)
        assert f"`{missing.package}` is not installed" in caught.message, (
            f"expected the message to name `{missing.package}` (hypnos.engine.missing_library); it reads "
            f"{described(caught.message)}"
        )


class InProcessSuite(RequestCases, ConformanceSuite):
    """Everything collected as `TestConformance` (pytest runs base classes' tests first: the memory check, which
    must see the library imported for the first time, leads)."""


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

    def test_concurrent_requests_in_a_host(self, conformance_engine: ConformanceTarget) -> None:
        """Requests sent together to a host answer as one by one and, where the engine batches, share its calls
        there (the host runs the calls it receives concurrently)."""
        if not conformance_engine.make().capabilities().batching:
            pytest.skip("the engine declares no batching")
        check_concurrent_answers(conformance_engine, hosted(conformance_engine))

    def test_the_estimate_is_not_inflated_in_a_host(self, conformance_engine: ConformanceTarget) -> None:
        """In its own host the library is the model's too: the estimate may cover the host's whole resident set
        after a load and one request (interpreter, library, weights), but not several times more (CPU engines)."""
        target = conformance_engine
        if target.context.accelerator == "NvidiaCuda":
            pytest.skip("the model runs on a device; its memory is not in the resident set")
        engine = hosted(target)
        estimate = engine.estimate()
        booked = estimate.weight_bytes + estimate.projector_bytes + estimate.workspace_bytes
        booked += estimate.kv_bytes_per_token * estimate.default_context_len

        async def walk() -> int:
            await engine.load(target.plan(engine, MemoryTier.TIER1))
            await target.request(engine, CancelToken())
            resident: int = engine.process_info().rss_bytes  # type: ignore[attr-defined]
            await engine.unload()
            return resident

        if not Path("/proc/self/statm").exists():
            pytest.skip("no resident-set figure on this platform (no /proc)")
        resident = asyncio.run(walk())
        assert resident > 0, "the host was gone after its request (no resident set to read)"
        allowed = resident * target.memory_over_factor + target.memory_slack_bytes
        assert booked <= allowed, (
            f"the estimate books {booked / MiB:.0f} MiB, yet the whole host held {resident / MiB:.0f} MiB after a load "
            f"and a request: expected at most {allowed / MiB:.0f} MiB (memory_over_factor {target.memory_over_factor})"
        )

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
        collector.obj.TestConformance = InProcessSuite  # a Class collector reads its class from the module
        collector.obj.TestConformanceInHost = HostedConformanceSuite
        return [
            pytest.Class.from_parent(collector, name="TestConformance"),
            pytest.Class.from_parent(collector, name="TestConformanceInHost"),
        ]
    return None
