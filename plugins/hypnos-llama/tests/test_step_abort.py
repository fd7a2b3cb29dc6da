"""A step of batch lines alone stops when an interactive job arrives: the interactive prefill runs at once, the lines'
tokens are fed again later with the same answers, and a step that carries interactive tokens is never stopped."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypnos.engine import ChatFinished, ContentDelta

WORDS = "the capital of France is Paris and the"


def pos_max(context: Any, seq: int) -> int:
    """The last position the sequence holds in the context's memory (-1: none)."""
    return int(context.lib.llama_memory_seq_pos_max(context.memory, seq))


class Run:
    """A batch loop on the tiny model (4 slots, 16-token ubatches) and the events of its jobs, in emission order."""

    def __init__(self, tiny_gguf: Path, governor: Any = None) -> None:
        from hypnos_llama.batch_loop import BatchLoop
        from hypnos_llama.options import LlamaOptions
        from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape

        options = LlamaOptions(n_threads=1 if governor is None else 2, adapt_threads=False)
        self.model = LlamaModel(tiny_gguf, options, 0)
        self.context = LlamaContext(self.model, options, context_shape(1024, 4, 64, 16))
        self.loop = BatchLoop(
            self.model, self.context, lambda _cells: self.context, prefill_chunk=64, name="abort", governor=governor
        )
        self.events: list[tuple[str, Any]] = []
        self.open = 0
        self.done = threading.Event()
        self.held: list[tuple[int, int]] = []
        self.partial = 0  # aborted steps that kept their first ubatches

    def job(self, name: str, words: int, max_tokens: int, priority: int) -> Any:
        """A job whose prompt is `words` words, with its tokens' log probabilities, running to max_tokens; sampled
        at temperature 1 with a seed of its own (the tiny model's greedy answer repeats one byte)."""
        from hypnos_llama.sampling import SamplingParams
        from hypnos_llama.slots import ChatJob

        def emit(event: Any) -> None:
            self.events.append((name, event))
            if isinstance(event, ChatFinished | BaseException):
                self.open -= 1
                if self.open == 0:
                    self.done.set()

        self.ends = [t for t in range(self.model.n_vocab) if self.model.is_eog(t)]  # banned: every answer runs long
        prompt = self.model.tokenize(" ".join((WORDS.split() * 20)[:words]))
        self.open += 1
        return ChatJob(
            prompt=prompt,
            max_tokens=max_tokens,
            required_ctx=len(prompt) + max_tokens + 1,
            sampling=SamplingParams(temperature=1.0, seed=len(prompt), logit_bias=dict.fromkeys(self.ends, -100.0)),
            emit=emit,
            top_logprobs=0,
            priority=priority,
        )

    def run(self, jobs: list[Any]) -> None:
        """Submit the jobs before the loop starts (the same steps every run), wait for every answer, stop."""
        for job in jobs:
            self.loop.submit(job)
        self.loop.start()
        try:
            assert self.done.wait(240)
        finally:
            self.loop.stop()
            # what each sequence's cells hold against what its slot says it holds
            self.held = [(pos_max(self.context, s.seq_id) + 1, len(s.cached)) for s in self.loop.slots]
            self.context.close()
            self.model.close()

    def tokens(self, name: str) -> list[tuple[bytes, float]]:
        """The job's sampled tokens (bytes, log probability)."""
        assert not any(isinstance(e, BaseException) for n, e in self.events if n == name), self.events
        return [
            (bytes(t.bytes or []), t.logprob)
            for n, e in self.events
            if n == name and isinstance(e, ContentDelta)
            for t in e.logprobs or []
        ]

    def wrap_decode(self, before: Callable[[], None], after: Callable[[int], None] = lambda status: None) -> None:
        """Call `before` ahead of each llama_decode of the loop and `after` with its status."""
        decode = self.context.decode

        def wrapped() -> int:
            before()
            status = decode()
            after(status)
            return status

        self.context.decode = wrapped  # type: ignore[method-assign]

    def batch_seqs(self) -> dict[int, int]:
        """The sequences in the batch about to be decoded and the first position of each."""
        batch, first = self.context.batch, {}
        for row in range(self.context.n_tokens):
            first.setdefault(int(batch.seq_id[row][0]), int(batch.pos[row]))
        return first


LINES = [("line0", 10, 12), ("line1", 16, 12), ("line2", 22, 12)]


def _lines(tiny_gguf: Path, abort_at: Callable[[], int] | None) -> Run:
    """The three batch lines run to the end; `abort_at`: each llama_decode stops after that many graph nodes."""
    run = Run(tiny_gguf)
    lib, context = run.model.lib, run.context
    mismatched: list[tuple[int, int, int]] = []
    partial = []
    state = {"left": -1, "held": {}}

    @lib.ggml_abort_callback
    def node_done(_data: Any) -> bool:
        state["left"] -= 1
        return state["left"] == 0

    def before() -> None:
        seqs = run.batch_seqs()
        for seq, first in seqs.items():  # every step feeds a sequence from where its cells end
            if pos_max(context, seq) + 1 != first:
                mismatched.append((seq, pos_max(context, seq), first))
        state["held"] = {seq: pos_max(context, seq) for seq in seqs}
        state["left"] = abort_at() if abort_at is not None else -1

    def after(status: int) -> None:
        if status == 2 and any(pos_max(context, seq) > held for seq, held in state["held"].items()):
            partial.append(status)  # the step kept its first ubatches

    if abort_at is not None:
        lib.llama_set_abort_callback(context.pointer, node_done, None)
    run.wrap_decode(before, after)
    run.run([run.job(name, words, tokens, -1) for name, words, tokens in LINES])
    assert mismatched == []
    run.partial = len(partial)
    return run


def test_batch_lines_aborted_mid_step_give_the_same_tokens(tiny_gguf: Path) -> None:
    plain = _lines(tiny_gguf, None)
    rng = random.Random(7)
    calls = iter(range(10_000))
    aborted = _lines(tiny_gguf, lambda: rng.randint(1, 150) if next(calls) % 2 == 0 else -1)
    for name, _words, tokens in LINES:  # the same tokens, with the same log probabilities to the bit
        assert len(plain.tokens(name)) == tokens
        assert aborted.tokens(name) == plain.tokens(name)
    assert all(cells == cached for cells, cached in aborted.held)
    assert aborted.loop.abort.aborted >= 5 and aborted.partial >= 1  # some kept their first ubatches


def _finishes(run: Run) -> list[str]:
    return [name for name, event in run.events if isinstance(event, ChatFinished)]


def test_an_interactive_job_arriving_during_a_batch_step_answers_before_that_step_ends(tiny_gguf: Path) -> None:
    plain = Run(tiny_gguf)
    plain.run([plain.job("line0", 3, 4, -1), plain.job("line1", 4, 4, -1)])
    run = Run(tiny_gguf)
    lines = [run.job("line0", 3, 4, -1), run.job("line1", 4, 4, -1)]
    mine = run.job("mine", 2, 1, 0)
    steps: list[dict[int, int]] = []

    def before() -> None:
        steps.append(run.batch_seqs())
        if len(steps) == 4:  # the step that samples the lines' last tokens: an interactive job comes
            run.loop.submit(mine)

    run.wrap_decode(before)
    run.run(lines)
    assert len(steps[0]) == len(steps[3]) == 2 and all(cells == cached for cells, cached in run.held)
    assert _finishes(plain) == ["line0", "line1"]
    assert _finishes(run) == ["mine", "line0", "line1"]  # its answer came before that step's tokens
    assert run.loop.abort.aborted == 1
    for name in ("line0", "line1"):
        assert run.tokens(name) == plain.tokens(name)


def test_a_step_carrying_interactive_tokens_is_never_aborted(tiny_gguf: Path) -> None:
    run = Run(tiny_gguf)
    line, first = run.job("line", 5, 40, -1), run.job("first", 3, 12, 0)
    second = run.job("second", 4, 2, 0)
    seq_of: dict[str, int] = {}
    statuses: list[int] = []

    def before() -> None:
        for slot in run.loop.slots:
            if slot.job is first:
                seq_of["first"] = slot.seq_id
            if slot.job is line:
                seq_of["line"] = slot.seq_id
        seqs = run.batch_seqs()
        if not statuses and "first" in seq_of and seq_of["first"] in seqs and seq_of["line"] in seqs:
            statuses.append(-100)  # an interactive job comes during a step of a stream and a batch line
            run.loop.submit(second)

    def after(status: int) -> None:
        if statuses == [-100]:
            statuses[0] = status

    run.wrap_decode(before, after)
    run.run([line, first])
    assert statuses == [0] and run.loop.abort.aborted == 0
    assert len(run.tokens("first")) == 12 and len(run.tokens("second")) == 2 and len(run.tokens("line")) == 40


def _narrowed_stream(tiny_gguf: Path, narrow_at: int | None) -> tuple[Run, list[tuple[int, int, dict[int, int]]]]:
    """A stream decoded with two threads until its share falls to one core before step `narrow_at` (None: never);
    each llama_decode's (threads, status, sequences' first positions)."""
    from hypnos_llama.thread_governor import ThreadGovernor

    governor = ThreadGovernor(2, pressure=lambda: None, taken=lambda: None)
    governor.record = lambda secs, tokens: None  # type: ignore[method-assign]  # the threads follow the share alone
    run = Run(tiny_gguf, governor)
    decodes: list[tuple[int, int, dict[int, int]]] = []
    aborted: list[bool] = []

    def before() -> None:
        decodes.append((governor.threads, -1, run.batch_seqs()))
        if len(decodes) == narrow_at:  # the scheduler gives the cores to another model during this step
            governor.share(1)
            aborted.append(run.loop.abort.narrow(1))

    def after(status: int) -> None:
        decodes[-1] = (decodes[-1][0], status, decodes[-1][2])

    run.wrap_decode(before, after)
    run.run([run.job("stream", 6, 20, 0)])
    assert aborted == ([] if narrow_at is None else [True])
    return run, decodes


def test_a_step_whose_core_share_shrinks_under_its_threads_is_aborted_and_fed_again(tiny_gguf: Path) -> None:
    """Two decode threads pinned to one core wait for each other at every graph node (steps of 2 s, bench cores): the
    step in flight stops and is fed again with the threads the new share allows, and the stream keeps its tokens."""
    plain, _ = _narrowed_stream(tiny_gguf, None)
    run, decodes = _narrowed_stream(tiny_gguf, 6)
    threads, status, seqs = decodes[5]
    assert (threads, status) == (2, 2)  # the step in flight with two threads was aborted
    assert decodes[6][0] == 1 and decodes[6][2] == seqs  # the same positions, fed again with one thread
    assert all(d[0] == 1 and d[1] == 0 for d in decodes[6:])
    assert run.loop.abort.aborted == 1 and all(cells == cached for cells, cached in run.held)
    mine, theirs = run.tokens("stream"), plain.tokens("stream")
    assert [t for t, _ in mine] == [t for t, _ in theirs] and len(mine) == 20
    assert all(abs(a - b) < 1e-3 for (_, a), (_, b) in zip(mine, theirs, strict=True))


def test_a_step_within_the_new_share_is_not_aborted(tiny_gguf: Path) -> None:
    from hypnos_llama.step_abort import AbortSwitch

    switch = AbortSwitch()
    switch.arm(False, 1)
    assert not switch.narrow(1) and switch.flag.value == b""
    switch.arm(False, 2)
    assert switch.narrow(1) and switch.flag.value == b"x"
    switch.disarm()
    assert not switch.narrow(1) and switch.flag.value == b""  # between steps: nothing to abort


def _beside_a_cancelled_prompt(tiny_gguf: Path, cancel: bool) -> tuple[Run, list[int]]:
    """A stream, and a long prompt whose request is cancelled (when `cancel`) during a step that prefills it; the
    statuses of every llama_decode."""
    run = Run(tiny_gguf)
    stream = run.job("stream", 6, 24, 0)
    long = run.job("long", 60, 4, 0) if cancel else None
    statuses: list[int] = []
    cancelled: list[int] = []

    def before() -> None:
        slot = next((s for s in run.loop.slots if long is not None and s.job is long), None)
        seqs = run.batch_seqs()
        if cancel and not cancelled and slot is not None and seqs.get(slot.seq_id, 0) >= 16:
            cancelled.append(len(statuses))  # deep in its prefill: the client leaves while the step runs
            long.cancel.cancel()  # type: ignore[union-attr]

    run.wrap_decode(before, statuses.append)
    run.run([stream] if long is None else [stream, long])
    return run, [statuses[i] for i in cancelled]


def test_a_step_prefilling_a_cancelled_request_stops_at_once(tiny_gguf: Path) -> None:
    """A chunk deep in a long prompt on a crowded CPU ran past the 10 s cancel grace and the engine host was killed
    with every request on it: the step prefilling a request whose client left is aborted, the slot freed, and the
    stream beside it keeps its tokens."""
    plain, _ = _beside_a_cancelled_prompt(tiny_gguf, cancel=False)
    run, statuses = _beside_a_cancelled_prompt(tiny_gguf, cancel=True)
    assert statuses == [2] and run.loop.abort.aborted == 1  # the step under way when the request left
    [finished] = [event for name, event in run.events if name == "long" and isinstance(event, ChatFinished)]
    assert finished.finish_reason == "cancelled"
    assert [t for t, _ in run.tokens("stream")] == [t for t, _ in plain.tokens("stream")]
    assert all(cells == cached for cells, cached in run.held)
