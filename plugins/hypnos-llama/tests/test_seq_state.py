"""A sequence's KV state as the prompt cache moves it: written after a header into one buffer, read back in place
from bytes (a state found on disk) or a bytearray (one that came through the shared file), the same cells either way."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest


def _prefill(context: Any, tokens: list[int], seq_id: int) -> None:
    context.batch_clear()
    for position, token in enumerate(tokens):
        context.batch_add(token, position, seq_id, position == len(tokens) - 1)
    assert context.decode() == 0


def _logits(model: Any, context: Any, index: int) -> list[float]:
    row = model.lib.llama_get_logits_ith(context.pointer, index)
    return [row[i] for i in range(model.n_vocab)]


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_a_state_saved_after_a_header_restores_the_same_cells(tiny_gguf: Path, kind: type) -> None:
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape

    model = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    context = LlamaContext(model, LlamaOptions(), context_shape(256, 2, 64, 64))
    try:
        tokens = model.tokenize("a prompt whose cells are saved and restored")
        _prefill(context, tokens, 0)
        head = struct.pack("<q", 42)
        blob = context.seq_state(0, head=head)
        assert blob[: len(head)] == head and len(blob) > len(head)
        assert bytes(blob[len(head) :]) == bytes(context.seq_state(0))  # the header, then the state as it is
        assert context.set_seq_state(1, kind(blob), skip=len(head))
        assert context.seq_pos_max(1) == context.seq_pos_max(0) == len(tokens) - 1
        # the restored cells predict what the saved ones do
        context.batch_clear()
        first = context.batch_add(tokens[-1], len(tokens), 0, True)
        second = context.batch_add(tokens[-1], len(tokens), 1, True)
        assert context.decode() == 0
        rows = [_logits(model, context, index) for index in (first, second)]
        assert rows[0] == rows[1]
    finally:
        context.close()
        model.close()


def test_an_empty_sequence_has_only_the_header_and_restores_nothing(tiny_gguf: Path) -> None:
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape

    model = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    context = LlamaContext(model, LlamaOptions(), context_shape(256, 2, 64, 64))
    try:
        head = b"12345678"
        blob = context.seq_state(1, head=head)
        assert context.set_seq_state(0, blob, skip=len(blob)) is False
        assert context.seq_pos_max(0) == -1
    finally:
        context.close()
        model.close()
