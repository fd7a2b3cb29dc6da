"""After a tool result, an answer that restates a call the result answers (or any bare JSON call) is sampled again
with its first token banned at the answer's start; a new call and words go out as written."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from hypnos.engine import ChatAccepted, ChatFinished, ContentDelta
from hypnos_llama.echo_guard import CLEAR, ECHO, HOLD, MAX_RETRIES, EchoGuard

OSLO = frozenset({("get_weather", '{"city":"Oslo"}')})


def verdicts(guard: EchoGuard, pieces: list[str]) -> list[str]:
    return [guard.feed(number, piece, ContentDelta(piece)) for number, piece in enumerate(pieces)]


@pytest.mark.parametrize(
    ("pieces", "last"),
    [
        (["<tool_call>", "\n", '{"name": "get_weather", ', '"arguments": {"city": "Oslo"}', "}"], ECHO),
        (["<tool_call>", "\n", '{"name": "get_weather", ', '"arguments": {"city": "Bergen"}', "}"], CLEAR),
        (["(", '{"name"', ":"], ECHO),  # a bare JSON call after a result, whatever its name
        ([">", '{"', "name", '":'], ECHO),
        (["[", '{"name":'], ECHO),
        (["```", "json", "\n", '{"', 'name":'], ECHO),
        (["```", "markdown", "\n", '{"', 'name":'], ECHO),
        (["```", "python", "\n", "print"], CLEAR),
        (["{\\", '"name', '":'], ECHO),  # the call with escaped quotes, once `{"` is banned (the 0.5B starter)
        (["\\", '{"name":'], ECHO),
        (['"', "get", "_weather", '"'], ECHO),  # the called function's name alone, quoted (the 0.5B starter)
        (["get_weather", '(city="Oslo")'], ECHO),
        (["get_weather", " says", " so\n"], CLEAR),
        (['"', "get", '_time"', "\n"], CLEAR),  # a name the result does not answer
        (["<", "tool", "_response", ">\n"], ECHO),  # the result restated in its template's wrapper
        (["<tool", "_call", ">"], HOLD),
        (["<", "b>", "Sunny\n"], CLEAR),
        (["The weather", " is sunny.\n"], CLEAR),  # a first line is held until it ends: a lead-in ends with `:`
        (["Here is the weather forecast for Paris:", "\n\n", '{"name"', ":"], ECHO),
        (["Here's a brief response for the `<tool_response>`:", "\n\n", "<tool_response>"], ECHO),
        (["The weather in Paris:", "\n", "- Sunny\n"], CLEAR),
        (["x" * 170], CLEAR),  # too long a first line to lead in
        (['{"', "temperature", '": 18}\n'], CLEAR),
        (["\n"], HOLD),
    ],
)
def test_the_guard_tells_a_restated_call_from_an_answer(pieces: list[str], last: str) -> None:
    guard = EchoGuard("<tool_call>", OSLO)
    said = verdicts(guard, pieces)
    assert said[-1] == last and all(verdict == HOLD for verdict in said[:-1]), said
    held = [delta.text for delta in guard.release()]
    assert held == pieces


def test_after_its_retries_the_answer_goes_out_as_written() -> None:
    guard = EchoGuard(None, OSLO)
    for _ in range(MAX_RETRIES):
        assert verdicts(guard, ['{"name":'])[-1] == ECHO
        guard.retry()
    assert guard.banned == [0] * MAX_RETRIES
    assert verdicts(guard, ['{"name":'])[-1] == CLEAR and not guard.deciding


def _answer(tiny_gguf: Path, guard: EchoGuard | None, bare: str | None = None) -> str:
    """The tiny model's answer to `hello` under a grammar that allows a restated call or `ok`, `{` biased up so that
    greedy sampling writes the call first; with `guard` on the job (given `bare`, the prompt it answers again from
    on the first echo)."""
    from hypnos_llama.batch_loop import BatchLoop
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape
    from hypnos_llama.sampling import SamplingParams
    from hypnos_llama.slots import ChatJob

    model = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    context = LlamaContext(model, LlamaOptions(), context_shape(256, 1, 64, 64))
    loop = BatchLoop(model, context, lambda _cells: context, prefill_chunk=64, name="echo")
    brace = next(t for t in range(model.n_vocab) if model.piece(t) == b"{")
    grammar = 'root ::= "{\\"name\\":\\"get_weather\\",\\"arguments\\":{\\"city\\":\\"Oslo\\"}}" | "ok"'
    events: list[Any] = []
    done = threading.Event()

    def emit(event: Any) -> None:
        events.append(event)
        if isinstance(event, ChatFinished | BaseException):
            done.set()

    sampling = SamplingParams(temperature=0.0, grammar=grammar, logit_bias={brace: 100.0})
    job = ChatJob(prompt=model.tokenize("hello"), max_tokens=100, required_ctx=256, sampling=sampling, emit=emit)
    job.echo_guard = guard
    asked = list(job.prompt)
    renders: list[list[int]] = []
    if guard is not None and bare is not None:
        guard.bare_prompt = lambda: renders.append(model.tokenize(bare)) or renders[-1]
    loop.start()
    try:
        loop.submit(job)
        assert done.wait(120)
    finally:
        loop.stop()
        context.close()
        model.close()
    assert isinstance(events[-1], ChatFinished), events
    if bare is not None:  # asked once, and the answer that went out was made from it
        assert len(renders) == 1 and job.prompt == renders[0] != asked
    # usage counts the prompt the client sent, whatever prompt the answer came from (one announcement)
    accepted = [event for event in events if isinstance(event, ChatAccepted)]
    assert [event.prompt_tokens for event in accepted] == [len(asked)]
    assert events[-1].prompt_tokens == len(asked) and events[-1].cached_tokens == accepted[0].cached_tokens
    return "".join(event.text for event in events if isinstance(event, ContentDelta))


def test_the_batch_loop_samples_a_restated_call_again_from_the_answer_start(tiny_gguf: Path) -> None:
    assert _answer(tiny_gguf, None) == '{"name":"get_weather","arguments":{"city":"Oslo"}}'
    assert _answer(tiny_gguf, EchoGuard(None, OSLO)) == "ok"


def test_a_restated_call_is_answered_again_from_the_prompt_without_the_tools_first(tiny_gguf: Path) -> None:
    """With the tools declared, the starter's likeliest openings after a result were "Mark the city as Oslo ...";
    without them, "The weather in Oslo is ...": the guard's first retry answers from the prompt without them."""
    assert _answer(tiny_gguf, EchoGuard(None, OSLO), bare="hello there, a prompt without the tools") == "ok"
    guard = EchoGuard(None, OSLO, lambda: None)  # the prompt could not be rendered: sampled again as before
    assert guard.restart() is None and guard.bare_prompt is None


def test_an_answer_given_again_after_a_restated_call_is_not_empty(
    tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told to answer again (without its tools, then with the call's first token banned), the 0.5B ended its turn
    at once in 1 of 12 draws of Google ADK's weather turn, and the client got an empty answer. The model's picks are
    scripted here: the first attempt restates the call, an answer given again ends at once wherever its first
    token may be the end of generation, else says ok. That end is banned there like the restated call's start."""
    import numpy as np
    from hypnos_llama import batch_loop, sampling

    attempts: list[int] = []

    class Scripted:
        def __init__(self, model: Any, _params: Any, _prompt: Any) -> None:
            self.model, self.attempt, self.written = model, len(attempts), 0
            attempts.append(self.attempt)
            self.eog = next(t for t in range(model.n_vocab) if model.is_eog(t))

        def sample(self, context: Any, index: int) -> int:
            row = self.model.lib.llama_get_logits_ith(context, index)
            logits = np.ctypeslib.as_array(row, shape=(self.model.n_vocab,))
            if self.attempt > 0 and self.written == 0 and logits[self.eog] > -np.inf:
                return self.eog
            text = '{"name":"get_weather","arguments":{"city":"Oslo"}}' if self.attempt == 0 else "ok"
            if self.written == len(text):
                return self.eog
            self.written += 1
            return next(t for t in range(self.model.n_vocab) if self.model.piece(t) == text[self.written - 1].encode())

        def free(self) -> None:
            pass

    monkeypatch.setattr(batch_loop, "SlotSampler", Scripted)
    monkeypatch.setattr(sampling, "SlotSampler", Scripted)
    assert _answer(tiny_gguf, EchoGuard(None, OSLO)) == "ok"
    assert attempts == [0, 1, 2]  # the call, the empty answer, then words
    attempts.clear()
    assert _answer(tiny_gguf, EchoGuard(None, OSLO), bare="hello there, a prompt without the tools") == "ok"
    assert attempts == [0, 1, 2]  # the call, the empty answer from the prompt without the tools, then words
