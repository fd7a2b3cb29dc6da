"""Sampling parameters from the request."""

from __future__ import annotations

from hypnos_llama.sampling import DEFAULT_TOP_K, SamplingParams
from hypnos_llama.testing import chat_request, sample_text


def _request(**fields):
    return chat_request("x", **fields)


def test_defaults_and_greedy() -> None:
    params = SamplingParams.from_request(_request(seed=7))
    assert params.top_k == DEFAULT_TOP_K and params.seed == 7 and not params.greedy
    assert SamplingParams.from_request(_request(temperature=0)).greedy


def test_values_are_clamped() -> None:
    params = SamplingParams.from_request(_request(temperature=-1, top_p=3, top_k=-5))
    assert params.temperature == 0 and params.top_p == 1.0 and params.top_k == 0


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
