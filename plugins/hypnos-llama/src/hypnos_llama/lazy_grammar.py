"""A grammar that waits for a trigger: free sampling until the output shows one, then the grammar holds from the
trigger on (llama.cpp's server's lazy grammars, done here so that no text the grammar refuses ever reaches it).

llama.cpp's own lazy sampler replays the text from the trigger into the grammar and aborts the process when the
grammar refuses it; here every replayed token is checked first, and a trigger whose text the grammar refuses is
dropped (the output stays free, and its tool calls are parsed as before).
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

# Triggers anywhere in the output are looked for in the newest bytes only (a trigger is shorter than this)
WINDOW = 64
# Triggers anchored at the answer's start are looked for while the output is at most this long
ANCHORED_BYTES = 256


class LazyGrammar:
    """Watches a slot's sampled tokens for a trigger; `accept` gives the grammar sampler once one is seen."""

    def __init__(self, model: Any, grammar: str, triggers: tuple[str, ...]) -> None:
        self.model = model
        self.grammar = grammar
        self.anywhere = [re.compile(pattern.encode()) for pattern in triggers if not pattern.startswith("^")]
        self.anchored = [re.compile(pattern.encode()) for pattern in triggers if pattern.startswith("^")]
        self.text = bytearray()
        self.tokens: list[tuple[int, int]] = []  # (token, offset of its first byte in text)
        self.searched = 0  # offsets before this are never a trigger's start again
        self.name_from: int | None = None  # where a bare call's name begins, once an anchored trigger fired
        self._one = (model.lib.llama_token_data * 1)()

    def accept(self, token: int) -> Any | None:
        """Record a sampled token; a grammar sampler already past the trigger's text when this token completes a
        trigger, else None."""
        piece = self.model.piece(token)
        self.tokens.append((token, len(self.text)))
        self.text += piece
        for start in self._starts(len(piece)):
            sampler = self._replay(start)
            if sampler is not None:
                bare = [found for pattern in self.anchored if start == 0 and (found := pattern.match(self.text))]
                self.name_from = bare[0].end() if bare else None
                return sampler
            self.searched = start + 1
        return None

    def _starts(self, newest: int) -> list[int]:
        starts = []
        if self.anchored and len(self.text) <= ANCHORED_BYTES:
            starts += [0 for pattern in self.anchored if self.searched == 0 and pattern.match(self.text)]
        begin = max(self.searched, len(self.text) - newest - WINDOW)
        for pattern in self.anywhere:
            found = pattern.search(self.text, begin)
            if found is not None:
                starts.append(found.start())
        return sorted(set(starts))

    def _replay(self, start: int) -> Any | None:
        """A grammar sampler fed the tokens from the one holding `start` on; None when it refuses one of them."""
        lib = self.model.lib
        sampler = lib.llama_sampler_init_grammar(self.model.vocab, self.grammar.encode("utf-8"), b"root")
        if not sampler:
            return None
        first = max(index for index, (_, offset) in enumerate(self.tokens) if offset <= start)
        for token, _ in self.tokens[first:]:
            if not self._allows(sampler, token):
                lib.llama_sampler_free(sampler)
                return None
            lib.llama_sampler_accept(sampler, token)
        return sampler

    def _allows(self, sampler: Any, token: int) -> bool:
        one = self._one
        one[0].id, one[0].logit, one[0].p = token, 1.0, 0.0
        self.model.lib.llama_sampler_apply(
            sampler, ctypes.byref(self.model.lib.llama_token_data_array(one, 1, -1, False))
        )
        return one[0].logit != float("-inf")
