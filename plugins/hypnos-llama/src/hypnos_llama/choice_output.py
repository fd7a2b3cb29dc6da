"""One choice's streamed text on the worker: bytes to UTF-8, `stop` strings cut out, log probabilities attached."""

from __future__ import annotations

import codecs
from typing import Any

from hypnos.engine import ContentDelta, TokenLogprob, TopLogprob


class StopMatcher:
    """Finds the first `stop` string in streamed text, holding back an end that could begin one (so a stop string
    split across tokens is never sent)."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [stop for stop in stops if stop]
        self.held = ""
        self.matched: str | None = None  # the stop string reached (the earliest in the text; first listed on a tie)

    def feed(self, text: str) -> tuple[str, bool]:
        """The text that may be sent now, and True when a stop string was reached (the text before it is sent)."""
        if not self.stops:
            return text, False
        buffer = self.held + text
        found = [(index, stop) for stop in self.stops if (index := buffer.find(stop)) >= 0]
        if found:
            self.held = ""
            at, self.matched = min(found, key=lambda hit: hit[0])
            return buffer[:at], True
        keep = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(buffer)), keep, -1):
                if stop.startswith(buffer[-size:]):
                    keep = size
                    break
        self.held = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """What was held back, at the end of the answer."""
        held, self.held = self.held, ""
        return held


class ChoiceOutput:
    """The text a slot's tokens make, sent as ContentDelta events of choice `index`."""

    def __init__(self, index: int, stops: list[str]) -> None:
        self.index = index
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.matcher = StopMatcher(stops)
        self.logprobs: list[TokenLogprob] | None = None

    def feed(self, piece: bytes, logprob: TokenLogprob | None = None) -> tuple[str, ContentDelta | None, bool]:
        """A token's bytes: its decoded text, the event to send (None when nothing is ready), and True at a stop."""
        text = self.decoder.decode(piece)
        if logprob is not None:
            self.logprobs = [*(self.logprobs or []), logprob]
        return text, *self._send(text)

    def insert(self, text: str) -> ContentDelta | None:
        """Text the server inserts (a closed thinking block), after the bytes still undecoded."""
        delta, _ = self._send(self.decoder.decode(b"", final=True) + text)
        return delta

    def flush(self) -> ContentDelta | None:
        """The end of the answer: undecoded bytes and held-back text."""
        ready, stopped = self.matcher.feed(self.decoder.decode(b"", final=True))
        return self._delta(ready if stopped else ready + self.matcher.flush())

    def _send(self, text: str) -> tuple[ContentDelta | None, bool]:
        ready, stopped = self.matcher.feed(text)
        return self._delta(ready), stopped

    def _delta(self, text: str) -> ContentDelta | None:
        if not text:
            return None
        delta = ContentDelta(text, self.index, self.logprobs)
        self.logprobs = None
        return delta


def token_logprob(model: Any, context: Any, index: int, token: int, top: int) -> TokenLogprob:
    """The sampled token's log probability under the model's distribution at batch row `index`, with the `top`
    likeliest tokens (OpenAI's logprobs entry)."""
    import numpy as np

    lib = model.lib
    logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(context.pointer, index), shape=(model.n_vocab,))
    peak = float(logits.max())
    norm = peak + float(np.log(np.exp(logits - peak).sum()))
    entries: list[TopLogprob] = []
    if top > 0:
        best = np.argpartition(-logits, top)[:top]
        for candidate in best[np.argsort(-logits[best])]:
            piece = model.piece(int(candidate))
            entries.append(
                TopLogprob(
                    token=piece.decode("utf-8", "replace"), logprob=float(logits[candidate]) - norm, bytes=list(piece)
                )
            )
    piece = model.piece(token)
    return TokenLogprob(
        token=piece.decode("utf-8", "replace"),
        logprob=float(logits[token]) - norm,
        bytes=list(piece),
        top_logprobs=entries,
    )
