"""After a tool result, an answer that only restates a call is tried again: small models (Qwen2.5-Coder-0.5B) answer a
result by writing the call they made once more, as bare JSON or in their call syntax, instead of words.

Runs on the worker beside the batch loop: the answer's first text is held back until it is clearly no restated call;
a restated call (any bare JSON call, the family's call syntax repeating a call the result answers, a called
function's name quoted or in call syntax, `"get_weather"`, or the result restated in its template wrapper,
`<tool_response>`, also after a short first line ending with `:`, which is held until it ends; a different call
passes) first makes the answer start
again from the prompt rendered without the tool definitions, when the job has one (the tool list is what draws the
restatement: after a result the starter's likeliest other openings were "Mark the city as Oslo ..." with the tools,
"The weather in Oslo is ..." without them); after that it rolls the slot back to the end of the prompt and samples
again with that attempt's first token banned at the answer's first position, up to MAX_RETRIES times (then the
answer goes out as the model writes it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from hypnos.engine import ContentDelta

from hypnos_llama.formats.tool_formats import BARE_STARTS, FENCE_TAG, canonical

MAX_RETRIES = 8
HOLD_CHARS = 4000  # held text past this length is let through undecided
LEAD_IN_CHARS = 160  # a first line longer than this leads in to nothing: the answer goes out
# What a model may write before a restated call: spaces and marks (`(`, `>`, `[`), a code fence and its info string
# (```json, ```markdown, ...)
LEAD = re.compile(r"^[^\w{<]*(?:json\b|(?<=```)" + FENCE_TAG + r")?[^\w{<]*")
HOLD, CLEAR, ECHO = "hold", "clear", "echo"
# The wrappers chat templates put around a tool result: an answer that opens with one restates the result (the 0.5B
# starter answered llm's `llm_time` result with `<tool_response>` and the result's JSON until max_tokens)
RESULT_OPENERS = ("<tool_response>", "<tool_result>")


class EchoGuard:
    """One job's guard: `opener` is the family's call opener when its calls are JSON (None: bare JSON only),
    `echoes` the (name, canonical arguments) of the calls the result answers."""

    def __init__(
        self,
        opener: str | None,
        echoes: frozenset[tuple[str, str]],
        bare_prompt: Callable[[], list[int] | None] | None = None,
    ) -> None:
        self.opener = opener
        self.echoes = echoes
        self.bare_prompt = bare_prompt  # the prompt without the tool definitions, tried once on the first echo
        self.banned: list[int] = []
        self.deciding = True
        self.text = ""
        self.first: int | None = None
        self.held: list[ContentDelta] = []
        self.retried = False  # the answer under way is one given again (after a restated call)

    def ban(self, model: Any, context: Any, index: int, completion: int) -> None:
        """At the answer's start (`completion` 0), make the retried attempts' first tokens unsampleable at batch row
        `index` (their logits set to -inf in place)."""
        if completion or not self.banned:
            return
        import numpy as np

        logits = np.ctypeslib.as_array(model.lib.llama_get_logits_ith(context.pointer, index), shape=(model.n_vocab,))
        logits[self.banned] = -np.inf

    def feed(self, token: int, text: str, delta: ContentDelta | None) -> str:
        """One accepted token, its text and the delta it made: HOLD (the delta is kept), CLEAR (send `release()`)
        or ECHO (retry the answer)."""
        if not self.deciding:
            return CLEAR
        if self.first is None:
            self.first = token
        self.text += text
        if delta is not None:
            self.held.append(delta)
        verdict = self._judge()
        if verdict == ECHO and len(self.banned) >= MAX_RETRIES:
            verdict = CLEAR
        if verdict == CLEAR:
            self.deciding = False
        return verdict

    def release(self) -> list[ContentDelta]:
        """The held deltas, to send (once the answer is clear, or at its end)."""
        held, self.held = self.held, []
        return held

    def restart(self) -> list[int] | None:
        """On the first restated call: the prompt to answer from again (without the tool definitions), the attempt
        forgotten; None once that was tried or where the job has none."""
        render, self.bare_prompt = self.bare_prompt, None
        prompt = render() if render is not None else None
        if prompt is not None:
            self.text, self.first, self.held, self.deciding, self.retried = "", None, [], True, True
        return prompt

    def ends_empty(self, token: int, completion: int) -> bool:
        """Whether an end of generation as the answer's first token is tried again like a restated call (True: it
        is then banned there): so when the answer is one given again, since a restated call was no answer and an
        empty one is none either (the 0.5B, told to answer again without its tools, ended its turn at once in 1 of
        12 draws of Google ADK's weather turn, and the client got an empty answer)."""
        if not (self.deciding and self.retried and completion == 0 and len(self.banned) < MAX_RETRIES):
            return False
        self.first = token
        return True

    def retry(self) -> None:
        """Forget the attempt and ban its first token at the answer's start."""
        if self.first is not None:
            self.banned.append(self.first)
        self.text, self.first, self.held, self.retried = "", None, [], True

    def _judge(self) -> str:
        verdict = self._judge_start(self.text)
        if verdict != CLEAR:
            return verdict
        # A short first line ending with `:` may lead in to a restated call ("Here is the weather forecast for
        # Paris:" and the call as bare JSON, in 5 of 10 agent loops of the 0.5B starter): it is held until it ends
        first, newline, rest = self.text.partition("\n")
        if len(first) > LEAD_IN_CHARS or len(self.text) > HOLD_CHARS:
            return CLEAR
        if not newline:
            return HOLD
        if not first.rstrip().endswith(":"):
            return CLEAR
        if not rest.strip():
            return HOLD
        return self._judge_start(rest)

    def _judge_start(self, text: str) -> str:
        """The verdict on `text` as the answer's start."""
        text = text.replace('\\"', '"')  # `{\"name": ...`: the call with its quotes escaped is a call too
        core = LEAD.sub("", text[:-1] if text.endswith("\\") else text)  # a last `\` may escape the next quote
        if core.startswith(RESULT_OPENERS):
            return ECHO
        if core and any(tag.startswith(core) for tag in RESULT_OPENERS):
            return HOLD
        opened = False
        if self.opener:
            if core.startswith(self.opener):
                core, opened = core[len(self.opener) :].lstrip(), True
            elif core and self.opener.startswith(core):
                return HOLD
        compact = "".join(core.split())
        if len(text) > HOLD_CHARS:
            return CLEAR
        if not compact:
            return HOLD if len(text) < 16 or opened else CLEAR
        if not compact.startswith(BARE_STARTS):
            if (named := self._names_a_call(core)) is not None:
                return named
            return HOLD if any(start.startswith(compact) for start in BARE_STARTS) else CLEAR
        if not opened:
            return ECHO  # a bare JSON call after a result: no call form here, and no answer
        try:
            value, _ = json.JSONDecoder().raw_decode(core)
        except ValueError:
            return HOLD  # the call is still being written
        return ECHO if _restates(value, self.echoes) else CLEAR

    def _names_a_call(self, core: str) -> str | None:
        """An answer that is a called function's name quoted or in call syntax (`"get_weather"`,
        `get_weather(city="Oslo")`): ECHO; HOLD while it may still become one; None otherwise."""
        for name, _ in self.echoes:
            if core.startswith(name):
                after = core[len(name) :]
                if not after:
                    return HOLD
                if after[0] in "\"'(":
                    return ECHO
            elif name.startswith(core):
                return HOLD
        return None


def _restates(value: Any, echoes: frozenset[tuple[str, str]]) -> bool:
    """True when the JSON is one call or a list of calls, each one the result answers."""
    calls = value if isinstance(value, list) else [value]
    found = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return False
        arguments = call.get("arguments", call.get("parameters", {}))
        found.append((call["name"], canonical(json.dumps(arguments) if not isinstance(arguments, str) else arguments)))
    return bool(found) and all(call in echoes for call in found)


def echo_guard(
    opener: str | None,
    echoes: frozenset[tuple[str, str]],
    *,
    enabled: bool,
    bare_prompt: Callable[[], list[int] | None] | None = None,
) -> EchoGuard | None:
    """A job's guard after a tool result (`echoes` not empty) when `enabled` (no media, no thinking, no forced call);
    `bare_prompt` renders the request without its tool definitions."""
    return EchoGuard(opener, echoes, bare_prompt) if echoes and enabled else None


def roll_back(context: Any, model: Any, slot: Any) -> bool:
    """Take the slot's answer back to the end of its prompt (a text prompt): its last prompt token decodes again and
    the next token is sampled afresh, with a new sampler and a new output. False when llama.cpp cannot drop the
    answer's cells (the answer then goes on)."""
    from hypnos_llama.choice_output import ChoiceOutput
    from hypnos_llama.sampling import SlotSampler

    job = slot.job
    keep = len(job.prompt) - 1
    if not context.seq_trim(slot.seq_id, keep):
        return False
    slot.cached = slot.cached[:keep]
    slot.pending = [job.prompt[-1]]
    slot.next_token = None
    slot.completion = 0
    slot.sampler.free()
    slot.sampler = SlotSampler(model, job.sampling, job.prompt)
    slot.output = ChoiceOutput(job.index, job.stop)
    return True
