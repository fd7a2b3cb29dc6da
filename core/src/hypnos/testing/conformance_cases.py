"""The conformance suite's checks of requests in flight together and of embedding inputs (part of TestConformance):
concurrent requests answer as one by one and share library calls when the engine batches; a request cancelled
mid-call leaves the others served; token ids, the vocabulary and the context length are the engine's to check."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from hypnos.engine import CancelToken, Engine
from hypnos.errors import HypnosError
from hypnos.testing.conformance_target import (
    ConformanceTarget,
    CountingToken,
    EngineWitness,
    assert_spec_error,
    described,
    refusal,
    shared_calls,
)
from hypnos.types import MemoryTier, Modality


def served(target: ConformanceTarget, walk: Callable[[Engine], Awaitable[Any]], engine: Engine | None = None) -> Any:
    """Run walk(engine) on a fresh engine (or the one given) loaded at tier 1, unloading it afterwards."""
    engine = engine if engine is not None else target.make()

    async def run() -> Any:
        await engine.load(target.plan(engine, MemoryTier.TIER1))
        try:
            return await walk(engine)
        finally:
            await engine.unload()

    return asyncio.run(run())


def check_concurrent_answers(target: ConformanceTarget, engine: Engine | None = None) -> None:
    """The requests sent together answer as one by one; an engine declaring batching shares a library call."""
    requests = target.requests()

    async def walk(engine: Engine) -> tuple[list[Any], list[Any], int | None]:
        alone = [await request(engine, CancelToken()) for request in requests]
        together = await asyncio.gather(*(request(engine, CancelToken()) for request in requests))
        if not engine.capabilities().batching:
            return alone, list(together), None
        # a crowd as well: on a busy machine three requests may reach the engine one call apart
        crowd = await asyncio.gather(*(request(engine, CancelToken()) for request in requests * 3))
        return alone, list(together), max(shared_calls(result) for result in [*together, *crowd])

    alone, together, shared = served(target, walk, engine)
    for index, (one, other) in enumerate(zip(alone, together, strict=True)):
        assert target.agree(one, other), f"request {index} answered otherwise when sent with the others"
    if shared is not None:
        assert shared > 1, "the engine declares batching, yet no library call served two of the concurrent requests"


class RequestCases:
    """Requests in flight together, and embedding inputs."""

    def test_concurrent_requests_answer_as_one_by_one(self, conformance_engine: ConformanceTarget) -> None:
        """N requests in flight give the answers they give one by one (and share calls when the engine batches)."""
        check_concurrent_answers(conformance_engine)

    def test_a_request_cancelled_mid_call_leaves_the_others_served(self, conformance_engine: ConformanceTarget) -> None:
        """One request cancelled while both are in the engine ends (a result or a spec error); the other is served
        with its own answer, and the engine serves on."""
        target = conformance_engine
        other = target.requests()[1]

        async def walk(engine: Engine) -> None:
            expected = await other(engine, CancelToken())
            leaving = CancelToken()
            # the cancel comes at the staying request's second check: both are in the engine (a batch, the worker)
            staying = CountingToken(then=leaving.cancel, then_at=2)
            outcomes = await asyncio.gather(
                target.request(engine, leaving), other(engine, staying), return_exceptions=True
            )
            if isinstance(outcomes[0], BaseException):
                assert isinstance(outcomes[0], HypnosError), f"the cancelled request raised {described(outcomes[0])}"
                assert_spec_error(outcomes[0])
            assert not isinstance(outcomes[1], BaseException), f"the request left alone failed: {outcomes[1]!r}"
            assert leaving.cancelled and staying.checks >= 2, "the engine never checked the staying request twice"
            assert target.agree(expected, outcomes[1]), "the request left alone answered otherwise"
            assert await target.request(engine, CancelToken()) is not None

        served(target, walk)

    def test_embedding_inputs_are_the_engines_to_check(self, conformance_engine: ConformanceTarget) -> None:
        """Token ids embed as their text does; an id outside the vocabulary and an input past the context length
        are refused by the engine (400, `context_length_exceeded` for the length); a bad input fails its own
        request only."""
        target = conformance_engine
        if target.model_config.modality != Modality.EMBEDDINGS:
            pytest.skip("the model serves no embeddings")
        facts = target.embedding
        assert facts is not None, "an embedding model's target gives `embedding=EmbeddingFacts(...)`"

        async def refused(witness: EngineWitness, inputs: list[Any]) -> HypnosError:
            error = await refusal(witness.embed(inputs, CancelToken()), f"a 400 for the inputs {described(inputs, 80)}")
            assert_spec_error(error, 400)
            assert witness.refused(error), "the 400 did not come out of the engine: it must refuse bad input itself"
            return error

        async def walk(engine: Engine) -> None:
            witness = EngineWitness(engine, target.kind)
            by_text = (await engine.embed([facts.text], CancelToken())).vectors[0]
            by_ids = (await engine.embed([facts.token_ids], CancelToken())).vectors[0]
            assert target.agree(by_text, by_ids), "token ids embed otherwise than the text they tokenize"
            await refused(witness, [facts.token_ids, [facts.vocab_size]])
            await refused(witness, [[-1]])
            longest = (facts.token_ids * (facts.max_tokens // len(facts.token_ids) + 1))[: facts.max_tokens]
            assert len((await engine.embed([longest], CancelToken())).vectors) == 1
            for too_long in ([*longest, facts.token_ids[0]], " ".join([facts.text] * (facts.max_tokens + 1))):
                error = await refused(witness, [facts.text, too_long])
                assert error.code == "context_length_exceeded", (
                    f"expected code context_length_exceeded, got {error.code}"
                )
            good, bad = await asyncio.gather(
                engine.embed([facts.text], CancelToken()), engine.embed([[-1]], CancelToken()), return_exceptions=True
            )
            assert isinstance(bad, HypnosError) and bad.status == 400, (
                f"expected a 400 for [[-1]], got {described(bad)}"
            )
            assert not isinstance(good, BaseException), f"a good request beside a bad one failed: {good!r}"
            assert target.agree(by_text, good.vectors[0]), "a good request beside a bad one answered otherwise"

        served(target, walk)
