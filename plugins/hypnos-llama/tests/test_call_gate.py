"""The call gate: at the answer's first token, a call's openers are banned when the model gives them less than the
configured probability (tool_choice "auto"), and the answer's start is then no call trigger."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hypnos_llama.call_gate import CallGate, opens_call

PIECES = [b"<tool_call>", b'{"', b"{", b"The", b" Rome", b"[", b"```", b"\n", b"<"]


class Pieces:
    """A model stand-in: token i's text is PIECES[i]."""

    def piece(self, token: int) -> bytes:
        return PIECES[token]


def _logits(weights: dict[int, float]) -> Any:
    import numpy as np

    return np.array([math.log(weights.get(i, 1e-9)) for i in range(len(PIECES))], dtype=np.float32)


def test_call_openers_are_the_opener_and_the_start_of_a_bare_call() -> None:
    openers = [piece for piece in PIECES if opens_call(piece, "<tool_call>", True)]
    assert openers == [b"<tool_call>", b'{"', b"{", b"```", b"<"]  # a lone `[` is a list in prose as often
    assert [piece for piece in PIECES if opens_call(piece, "<tool_call>", False)] == [b"<tool_call>", b"<"]
    assert opens_call(b' [{"', None, True) and not opens_call(b'{"a', None, True)


def test_a_call_under_the_floor_is_banned_and_one_over_it_is_not() -> None:
    gate = CallGate("<tool_call>", True, floor=0.5)
    split = _logits({0: 0.25, 1: 0.1, 3: 0.4, 4: 0.25})  # the opener is the likeliest token, but calls hold 0.35
    assert gate.weigh(Pieces(), split)
    assert int(split.argmax()) == 3 and all(split[i] == -math.inf for i in (0, 1, 2, 6, 8))
    sure = _logits({0: 0.7, 3: 0.3})
    assert not gate.weigh(Pieces(), sure)
    assert int(sure.argmax()) == 0


def test_a_banned_call_leaves_the_answer_start_free_on_the_tiny_model(tiny_gguf: Path, monkeypatch: Any) -> None:
    """A floor of 1 bans every opener: the first token is no opener, and bare JSON at the start triggers nothing."""
    monkeypatch.setattr("hypnos_llama.call_gate.TOP_TOKENS", 1 << 20)  # the whole tiny vocabulary is looked at
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape
    from hypnos_llama.sampling import SamplingParams, SlotSampler
    from hypnos_llama.testing import sample_text
    from hypnos_llama.tool_grammar import BARE_TRIGGER

    model = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    context = LlamaContext(model, LlamaOptions(), context_shape(256, 1, 64, 64))
    params = SamplingParams(
        temperature=0, grammar='root ::= "{}"', triggers=(BARE_TRIGGER,), gate=CallGate(None, True, floor=1.0)
    )
    sampler = SlotSampler(model, params)
    try:
        text, _ = sample_text(model, context, sampler, "hello", 1)
        assert not opens_call(text, None, True)
        assert sampler.gate is None and sampler.lazy is not None and not sampler.lazy.anchored
    finally:
        sampler.free()
        context.close()
        model.close()
