"""Sampling parameters from the request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos_llama.sampling import DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, SamplingDefaults, SamplingParams
from hypnos_llama.testing import (
    chat_request,
    collect,
    make_engine,
    sample_text,
    sample_tokens,
    tier1,
    write_tiny_llama,
)


def _request(**fields):
    return chat_request("x", **fields)


def test_defaults_and_greedy() -> None:
    params = SamplingParams.from_request(_request(seed=7))
    assert params.top_k == DEFAULT_TOP_K and params.seed == 7 and not params.greedy
    assert SamplingParams.from_request(_request(temperature=0)).greedy


def test_values_are_clamped() -> None:
    params = SamplingParams.from_request(_request(temperature=-1, top_p=3, top_k=-5))
    assert params.temperature == 0 and params.top_p == 1.0 and params.top_k == 0


def test_a_models_defaults_come_from_its_config_then_its_gguf_then_the_engine() -> None:
    metadata = {"general.sampling.temp": 0.6, "general.sampling.top_k": 30, "general.sampling.top_p": "high"}
    configured: dict[str, Any] = {"temperature": 0.2, "top_p": None, "top_k": None, "min_p": None}
    defaults = SamplingDefaults.of_model(configured, metadata)
    assert (defaults.temperature, defaults.top_k) == (0.2, 30)
    assert (defaults.top_p, defaults.min_p) == (DEFAULT_TOP_P, DEFAULT_MIN_P)  # a GGUF value of the wrong type
    params = SamplingParams.from_request(_request(top_k=5), defaults=defaults)
    assert (params.temperature, params.top_k, params.top_p) == (0.2, 5, DEFAULT_TOP_P)  # the request's own wins


def test_the_repetition_penalty_comes_from_the_request_then_the_config_then_the_gguf() -> None:
    metadata = {"general.sampling.penalty_repeat": 1.05, "general.sampling.penalty_last_n": 128}
    assert SamplingDefaults.of_model({}, {}).repeat_penalty == 1.0  # off unless the model asks for it
    defaults = SamplingDefaults.of_model({"repeat_penalty": 1.1}, metadata)
    assert (defaults.repeat_penalty, defaults.repeat_last_n) == (1.1, 128)
    assert isinstance(defaults.repeat_last_n, int)
    params = SamplingParams.from_request(_request(), defaults=defaults)
    assert (params.repeat_penalty, params.repeat_last_n, params.repeats) == (1.1, 128, True)
    turned_off = SamplingParams.from_request(_request(repeat_penalty=1.0), defaults=defaults)
    assert not turned_off.repeats


async def _answers(path: Path, llama: dict[str, Any] | None = None, **fields: Any) -> tuple[str, list[str]]:
    """The greedy answer, then three seeded answers of requests that send only `fields` of the sampling ones."""
    engine = make_engine(path, slots=1, context_len=512, llama=llama)
    await engine.load(tier1(512))
    try:
        greedy, _, _ = await collect(engine, chat_request("tell me a story", temperature=0), max_tokens=24)
        answers = [
            (await collect(engine, chat_request("tell me a story", seed=seed, **fields), max_tokens=24))[0]
            for seed in (1, 2, 3)
        ]
        return greedy, answers
    finally:
        await engine.unload()


async def test_a_request_that_sends_no_sampling_takes_the_models_own(tmp_path: Path) -> None:
    """A GGUF whose general.sampling.top_k is 1 answers greedily whatever the seed, as does a model configured so;
    a request's own top_k and temperature, or the config's, sample as they say."""
    plain = write_tiny_llama(tmp_path / "plain.gguf")
    greedy, engine_defaults = await _answers(plain)
    assert set(engine_defaults) != {greedy}  # the engine's own defaults sample
    top_one = write_tiny_llama(tmp_path / "top-one.gguf", sampling={"top_k": 1, "temp": 0.9})
    assert await _answers(top_one) == (greedy, [greedy] * 3)
    assert await _answers(plain, {"top_k": 1}) == (greedy, [greedy] * 3)
    _, configured = await _answers(top_one, {"top_k": 40, "temperature": 1.5})
    _, requested = await _answers(top_one, top_k=40, temperature=1.5)
    assert set(configured) != {greedy} and set(requested) != {greedy}


def test_the_repetition_penalty_weighs_the_prompts_tokens_and_the_answers(tiny_gguf) -> None:
    """The prompt ends with what the model says greedily, and the plain greedy answer goes on with tokens of it; with
    a repetition penalty so strong that a penalised token never wins, the answer repeats no token of its own and
    none of the prompt's."""
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape
    from hypnos_llama.sampling import SlotSampler

    model = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    context = LlamaContext(model, LlamaOptions(), context_shape(256, 1, 64, 64))
    start = model.tokenize("the fox saw the dog", add_special=True)
    samplers = []

    def answer(prompt: list[int], steps: int, media: list[int] | None = None, **penalty: Any) -> list[int]:
        """`media`: content ids (negative) the sampler sees before the prompt, as a media prompt's job has them."""
        samplers.append(SlotSampler(model, SamplingParams(temperature=0, **penalty), (media or []) + prompt))
        context.seq_trim(0, 0)
        return sample_tokens(model, context, samplers[-1], prompt, steps)[0]

    try:
        prompt = start + answer(start, 16)
        assert set(answer(prompt, 8)) & set(prompt)  # unpenalised, the model says again what it said
        penalised = answer(prompt, 24, repeat_penalty=1e6, repeat_last_n=-1)
        assert len(penalised) == 24 and len(set(penalised)) == 24
        assert not set(penalised) & set(prompt)
        # a media prompt's content ids (negative) reach llama.cpp's penalty too, which counts them where no token is
        assert answer(prompt, 24, media=[-3, -(2**20)], repeat_penalty=1e6, repeat_last_n=-1) == penalised
    finally:
        for sampler in samplers:
            sampler.free()
        context.close()
        model.close()


async def test_a_model_configured_with_a_repetition_penalty_answers_otherwise(tmp_path: Path) -> None:
    """`[models.llama] repeat_penalty` changes the model's greedy answer; a request that sends 1.0 turns it off."""
    path = write_tiny_llama(tmp_path / "plain.gguf")
    answers = []
    for llama, fields in (
        ({}, {}),
        ({"repeat_penalty": 50.0, "repeat_last_n": -1}, {}),
        ({"repeat_penalty": 50.0}, {"repeat_penalty": 1.0}),
    ):
        engine = make_engine(path, slots=1, context_len=512, llama=llama or None)
        await engine.load(tier1(512))
        try:
            answers.append(
                (await collect(engine, chat_request("tell me a story", temperature=0, **fields), max_tokens=24))[0]
            )
        finally:
            await engine.unload()
    plain, penalised, turned_off = answers
    assert penalised != plain and turned_off == plain


def test_a_grammar_holds_every_sampled_token_on_the_tiny_model(tiny_gguf) -> None:
    """Random weights rarely write JSON by themselves: every token the grammar-checked sampler picks still keeps
    the text a prefix of `{"a": true}`-shaped output."""
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape
    from hypnos_llama.sampling import SlotSampler

    model = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    context = LlamaContext(model, LlamaOptions(), context_shape(256, 1, 64, 64))
    grammar = 'root ::= "{" ws "\\"a\\"" ws ":" ws ("true" | "false") ws "}"\nws ::= " "?'
    sampler = SlotSampler(model, SamplingParams(temperature=1.0, seed=5, grammar=grammar))
    try:
        text, ended = sample_text(model, context, sampler, "hello", 30)
        assert ended
        assert text.replace(b" ", b"") in (b'{"a":true}', b'{"a":false}')
    finally:
        sampler.free()
        context.close()
        model.close()


def test_plain_greedy_picks_what_llama_cpp_greedy_sampler_picks(tiny_gguf) -> None:
    """The argmax read in place and llama.cpp's greedy sampler (reached here through a no-op logit bias) agree on
    every row of a batch whose rows all have logits."""
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape
    from hypnos_llama.sampling import SlotSampler

    model = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    context = LlamaContext(model, LlamaOptions(), context_shape(256, 1, 64, 64))
    plain = SlotSampler(model, SamplingParams(temperature=0))
    chained = SlotSampler(model, SamplingParams(temperature=0, logit_bias={0: 0.0}))
    try:
        tokens = model.tokenize("hello there, fox", add_special=True)[:48]
        context.batch_clear()
        for position, token in enumerate(tokens):
            context.batch_add(token, position, 0, True)
        assert context.decode() == 0
        picked = [plain.sample(context.pointer, row) for row in range(len(tokens))]
        assert picked == [chained.sample(context.pointer, row) for row in range(len(tokens))]
        assert len(set(picked)) > 1  # rows with different answers: the row index is honoured
    finally:
        plain.free()
        chained.free()
        context.close()
        model.close()
