"""The tokenizer's input bounded before llama.cpp sees it: characters capped per model, long texts tokenized in
pieces with a cancellation check between them.

llama.cpp tokenizes in one uninterruptible call whose time grows faster than the text (a 400k-character run: about
a minute), so a text longer than the model could ever take (CHARS_PER_TOKEN characters a token of its context, or
[models.llama] max_tokenize_chars) is refused with 400 before it is tokenized, and a long one is cut at line starts
(a pre-token boundary of every BPE vocabulary, so the tokens are the same) into pieces of about PIECE_CHARS.
"""

from __future__ import annotations

from collections.abc import Callable

from hypnos.engine import CancelToken
from hypnos.errors import HypnosError, clip

CHARS_PER_TOKEN = 8  # no real text is longer a token; a text past this many characters a token cannot fit
PIECE_CHARS = 16_384
BPE = 2  # LLAMA_VOCAB_TYPE_BPE


def tokenize_chars_cap(configured: int | None, context_tokens: int) -> int:
    """The characters one text may hold before it is tokenized: configured, else CHARS_PER_TOKEN x the context."""
    return configured if configured else CHARS_PER_TOKEN * max(1, context_tokens)


def check_chars(text: str, cap: int, model_id: str, where: str = "the prompt") -> None:
    """400 context_length_exceeded naming the cap when the text is longer, before any tokenizing."""
    if len(text) > cap:
        raise HypnosError(
            400,
            "invalid_request_error",
            f"{where} is too long: {len(text)} characters > {cap} maximum (the model `{clip(model_id)}` tokenizes "
            f"at most {cap} characters: [models.llama] max_tokenize_chars)",
            code="context_length_exceeded",
        )


def pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """The text cut at the first line start (a newline followed by a character that is no whitespace) past every
    `size` characters; a text without such a place stays whole."""
    out, start = [], 0
    while len(text) - start > size:
        cut = start + size
        while True:
            cut = text.find("\n", cut)
            if cut < 0 or cut + 1 >= len(text):
                out.append(text[start:])
                return out
            if not text[cut + 1].isspace() and not text[cut - 1].isspace():
                break
            cut += 1
        out.append(text[start : cut + 1])
        start = cut + 1
    out.append(text[start:])
    return out


def tokenize_stoppable(
    tokenize: Callable[[str, bool], list[int]], text: str, vocab_type: int, cancel: CancelToken | None
) -> list[int]:
    """`tokenize(piece, add_special)` over the text's pieces (BPE vocabularies; others whole), stopping with 499 at
    a cancellation between pieces."""
    parts = pieces(text) if vocab_type == BPE else [text]
    tokens: list[int] = []
    for index, part in enumerate(parts):
        if index and cancel is not None and cancel.cancelled:
            raise HypnosError(499, "cancelled", "the request was cancelled while its prompt was tokenized")
        tokens += tokenize(part, index == 0)
    return tokens
