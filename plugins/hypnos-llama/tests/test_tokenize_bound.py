"""The tokenizer's input is bounded: a prompt past the model's characters cap is a 400 before llama.cpp tokenizes
it, and a long prompt is tokenized in pieces (a cancellation stops it between them) into the same tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos.engine import CancelToken
from hypnos.errors import HypnosError
from hypnos_llama.testing import chat_request, collect, make_engine, tier1
from hypnos_llama.tokenize_bound import CHARS_PER_TOKEN, pieces, tokenize_stoppable


async def test_a_prompt_past_the_characters_cap_is_refused_before_tokenizing(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf, llama={"max_tokenize_chars": 1000})
    await engine.load(tier1())
    try:
        with pytest.raises(HypnosError) as caught:
            await collect(engine, chat_request("word " * 400), max_tokens=2)
        assert caught.value.status == 400 and caught.value.code == "context_length_exceeded"
        assert "at most 1000" in caught.value.message and "max_tokenize_chars" in caught.value.message
        _, final, _ = await collect(engine, chat_request("word " * 100), max_tokens=2)
        assert final.completion_tokens == 2
    finally:
        await engine.unload()


async def test_the_default_cap_is_eight_characters_a_context_token(tiny_gguf: Path) -> None:
    engine = make_engine(tiny_gguf)
    await engine.load(tier1())
    try:
        assert engine._runtime_model is not None
        context = int(engine._runtime_model.n_ctx_train)
        with pytest.raises(HypnosError) as caught:
            await collect(engine, chat_request("x" * (CHARS_PER_TOKEN * context + 1)), max_tokens=2)
        assert f"at most {CHARS_PER_TOKEN * context}" in caught.value.message
    finally:
        await engine.unload()


def test_pieces_cut_only_at_line_starts() -> None:
    text = ("alpha beta\n" * 5000) + "  indented\n\nnext"
    cut = pieces(text, 1000)
    assert "".join(cut) == text and len(cut) > 10
    assert all(piece.endswith("\n") and not piece.endswith(" \n") for piece in cut[:-1])
    assert pieces("y" * 50_000, 1000) == ["y" * 50_000]  # no line start: whole


def test_a_cancellation_stops_tokenizing_between_pieces() -> None:
    cancel, calls = CancelToken(), []

    def tokenize(piece: str, first: bool) -> list[int]:
        calls.append(first)
        cancel.cancel()
        return [len(piece)]

    with pytest.raises(HypnosError) as caught:
        tokenize_stoppable(tokenize, "line of words\n" * 10_000, 2, cancel)
    assert caught.value.status == 499 and calls == [True]


def test_qwen_tokens_in_pieces_are_the_tokens_of_the_whole(qwen_models_dir: Path) -> None:
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaModel

    model = LlamaModel(qwen_models_dir / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", LlamaOptions(), 0)
    try:
        text = "".join(
            f"value_{i} = compute({i}, 'café 東京')\nprint(value_{i})\n\n    # note {i}\n" for i in range(3000)
        )
        whole = model.tokenize(text, add_special=True, parse_special=True)
        cut = tokenize_stoppable(
            lambda piece, first: model.tokenize(piece, add_special=first, parse_special=True),
            text,
            model.vocab_type,
            None,
        )
        assert model.vocab_type == 2 and len(pieces(text)) > 5
        assert cut == whole
    finally:
        model.close()
