"""With tool_choice "auto", a call at the answer's start is written only when the model means it enough: at the
answer's first token the probability the model gives the tokens that open a call (the family's opener; `{"name":`,
its list and a code fence for the families whose models write calls as bare JSON) is weighed against everything
else; under the model's `call_confidence` those tokens are banned there and the answer's start is no call trigger,
so the model answers in words (greedy decoding writes a call whenever an opener is the likeliest token). Off by
default: on Qwen2.5-Coder-0.5B the false call "What is the capital of Italy?" (0.69) is no less sure than intended
calls ("How much is one share of MSFT?", 0.70; the README's table).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from hypnos_llama.formats.tool_formats import bare_start

logger = logging.getLogger(__name__)
# The likeliest tokens looked at: the openers' mass beyond them is negligible (and top_k cuts it anyway)
TOP_TOKENS = 256


def opens_call(piece: bytes, opener: str | None, bare: bool) -> bool:
    """True when a token's text starts a call: the opener or a start of it, or (`bare`) a start of `{"name":` /
    `[{"name":` or a code fence (the small models' ```json block; a lone `[` is a list in prose as often)."""
    compact = "".join(piece.decode("utf-8", "ignore").split())
    if not compact:
        return False
    if opener and (compact.startswith(opener) or opener.startswith(compact)):
        return True
    return bare and compact != "[" and (compact.startswith("```") or bare_start(compact) is not False)


@dataclass(frozen=True)
class CallGate:
    """The answer's first token under tool_choice "auto": the call's `opener` (None: bare JSON only), whether bare
    JSON is a call form (`bare`), and the least probability of opening a call that lets one be written (`floor`)."""

    opener: str | None
    bare: bool
    floor: float
    name_floor: float = 0.0  # a bare call's name: the least probability on the declared names (SlotSampler)

    def weigh(self, model: Any, logits: Any) -> bool:
        """Ban the call openers among the likeliest tokens in `logits` (the first token's row, changed in place)
        when their probability is under the floor; True when they were banned."""
        import numpy as np

        if self.floor <= 0:
            return False
        top = np.argpartition(logits, -TOP_TOKENS)[-TOP_TOKENS:] if len(logits) > TOP_TOKENS else np.arange(len(logits))
        openers = [int(token) for token in top if opens_call(model.piece(int(token)), self.opener, self.bare)]
        if not openers:
            return False
        weights = np.exp(logits - logits.max())
        confidence = float(weights[openers].sum() / weights.sum())
        banned = confidence < self.floor
        if logger.isEnabledFor(logging.DEBUG):
            likeliest = sorted(top.tolist(), key=lambda token: -logits[token])[:5]
            shares = [(model.piece(token), round(float(weights[token] / weights.sum()), 3)) for token in likeliest]
            logger.debug(
                "call confidence %.3f at the answer's start (floor %.2f, %s); likeliest %s",
                confidence,
                self.floor,
                "banned" if banned else "free",
                shares,
            )
        if banned:
            logits[openers] = -np.inf
        return banned


def call_gate(
    constraint: Any, opener: str | None, floor: float, name_floor: float = 0.0, *, thinking: bool
) -> CallGate | None:
    """The gate of a request whose call grammar waits for a trigger (tool_choice "auto", a JSON-calling family):
    None when both floors are 0, without such a grammar, or when the answer starts with thinking."""
    from hypnos_llama.tool_grammar import BARE_TRIGGER

    if constraint is None or not constraint.triggers or (floor <= 0 and name_floor <= 0) or thinking:
        return None
    return CallGate(opener, BARE_TRIGGER in constraint.triggers, floor, name_floor)
