"""Batch loop pieces that need no model: prefix matching and incremental UTF-8 text."""

from __future__ import annotations

from hypnos.engine import ChatFinished, ContentDelta
from hypnos_llama.batch_loop import BatchLoop
from hypnos_llama.choice_output import ChoiceOutput, StopMatcher
from hypnos_llama.runtime import ContextShape
from hypnos_llama.sampling import SamplingParams
from hypnos_llama.slots import ChatJob, Slot, common_prefix


class _Model:
    """Pieces split a multi-byte character across tokens; token 9 ends generation."""

    lib = None
    pieces = {
        1: "é".encode()[:1],
        2: "é".encode()[1:],
        3: b"a",
        4: "€".encode()[:2],
        5: "€".encode()[2:],
        10: b"Hel",
        11: b"lo E",
        12: b"N",
        13: b"D more",
        14: b"E",
        15: b"x",
    }

    def is_eog(self, token: int) -> bool:
        return token == 9

    def piece(self, token: int) -> bytes:
        return self.pieces[token]


class _Context:
    shape = ContextShape(n_ctx=256, n_seq=1, n_batch=32, n_ubatch=32)

    def abort_when(self, flag: object) -> None:
        pass


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2]) == 2


def test_multibyte_characters_are_never_split() -> None:
    events: list = []
    loop = BatchLoop(_Model(), _Context(), lambda n: _Context(), prefill_chunk=8, name="t")  # type: ignore[arg-type]
    job = ChatJob(prompt=[7, 7], max_tokens=50, required_ctx=100, sampling=SamplingParams(), emit=events.append)
    slot = Slot(seq_id=0, job=job, cached=[7, 7], output=ChoiceOutput(0, []))
    loop.slots = [slot]
    for token in (1, 2, 3, 4, 5, 9):
        loop._accept(slot, token)
    texts = [e.text for e in events if isinstance(e, ContentDelta)]
    assert texts == ["é", "a", "€"]
    assert isinstance(events[-1], ChatFinished) and events[-1].finish_reason == "stop"
    assert events[-1].completion_tokens == 5 and slot.job is None


def _run(tokens: tuple[int, ...], stop: list[str]) -> list:
    events: list = []
    loop = BatchLoop(_Model(), _Context(), lambda n: _Context(), prefill_chunk=8, name="t")  # type: ignore[arg-type]
    job = ChatJob(
        prompt=[7, 7],
        max_tokens=50,
        required_ctx=100,
        sampling=SamplingParams(),
        emit=events.append,
        stop=stop,
        index=2,
    )
    slot = Slot(seq_id=0, job=job, cached=[7, 7], output=ChoiceOutput(2, stop))
    loop.slots = [slot]
    for token in tokens:
        if slot.job is None:
            break
        loop._accept(slot, token)
    return events


def test_a_stop_string_split_across_tokens_ends_the_answer_unsent() -> None:
    events = _run((10, 11, 12, 13, 9), ["END"])
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "Hello "
    assert all("E" not in e.text for e in events if isinstance(e, ContentDelta))
    finished = events[-1]
    assert isinstance(finished, ChatFinished) and finished.finish_reason == "stop" and finished.index == 2
    assert finished.completion_tokens == 4
    assert {e.index for e in events} == {2}


def test_a_partial_stop_string_is_sent_once_it_cannot_match() -> None:
    events = _run((10, 11, 12, 15, 9), ["END"])
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "Hello ENx"
    assert events[-1].finish_reason == "stop" and events[-1].completion_tokens == 4


def test_the_stop_string_that_ended_the_answer_is_reported() -> None:
    assert _run((10, 11, 12, 13, 9), ["zz", "END"])[-1].stop_sequence == "END"
    assert _run((10, 11, 12, 15, 9), ["END"])[-1].stop_sequence is None  # ended by the model's end token
    matcher = StopMatcher(["b", "ab"])
    assert matcher.feed("xab") == ("x", True) and matcher.matched == "ab"  # the earliest in the text


def test_stop_matcher_holds_only_what_could_begin_a_stop() -> None:
    matcher = StopMatcher(["</s>", "##"])
    assert matcher.feed("a <") == ("a ", False)
    assert matcher.feed("/") == ("", False)
    assert matcher.feed("x #") == ("</x ", False)
    assert matcher.feed("#tail") == ("", True)


class _RecordingContext:
    """Keeps every decoded batch as (token, position, wants logits) rows."""

    shape = ContextShape(n_ctx=256, n_seq=1, n_batch=32, n_ubatch=32)
    pointer = None
    unified = True

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, bool]] = []
        self.decoded: list[list[tuple[int, int, bool]]] = []

    def batch_clear(self) -> None:
        self.rows = []

    def batch_add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        self.rows.append((token, pos, logits))
        return len(self.rows) - 1

    def decode(self) -> int:
        self.decoded.append(self.rows)
        return 0

    def abort_when(self, flag: object) -> None:
        pass


class _FirstToken:
    def sample(self, context: object, index: int) -> int:
        return 3

    def free(self) -> None:
        pass


def _decodes_until_the_first_token(**options: bool) -> list[list[tuple[int, int, bool]]]:
    events: list = []
    context = _RecordingContext()
    loop = BatchLoop(_Model(), context, lambda n: context, prefill_chunk=8, name="t", **options)  # type: ignore[arg-type]
    job = ChatJob(prompt=[5, 6, 7, 8], max_tokens=1, required_ctx=100, sampling=SamplingParams(), emit=events.append)
    loop.slots = [Slot(seq_id=0, job=job, pending=[5, 6, 7, 8], output=ChoiceOutput(0, []), sampler=_FirstToken())]
    while not events:
        loop._step()
    assert isinstance(events[0], ContentDelta) and events[0].text == "a"
    return context.decoded


def test_a_new_prompt_decodes_whole_in_one_step_before_its_first_token() -> None:
    assert _decodes_until_the_first_token() == [[(5, 0, False), (6, 1, False), (7, 2, False), (8, 3, True)]]


def test_deterministic_prefill_decodes_the_last_prompt_token_in_a_step_of_its_own() -> None:
    decoded = _decodes_until_the_first_token(last_token_alone=True)
    assert decoded == [[(5, 0, False), (6, 1, False), (7, 2, False)], [(8, 3, True)]]


def test_an_interactive_prompt_prefills_alone_then_batch_lines_decode_beside_its_stream() -> None:
    events: list = []
    context = _RecordingContext()
    loop = BatchLoop(_Model(), context, lambda n: context, prefill_chunk=8, name="t")  # type: ignore[arg-type]

    def slot(seq: int, priority: int, **state: object) -> Slot:
        job = ChatJob(
            prompt=[5, 6, 7, 8], max_tokens=4, required_ctx=100, sampling=SamplingParams(), emit=events.append
        )
        job.priority = priority
        return Slot(seq_id=seq, job=job, output=ChoiceOutput(0, []), sampler=_FirstToken(), **state)  # type: ignore[arg-type]

    lines = [slot(seq, -1, cached=[5, 6, 7, 8], next_token=3, first_token=1.0) for seq in (0, 1)]
    mine = slot(2, 0, pending=[5, 6, 7, 8])
    loop.slots = [*lines, mine]
    for _ in range(3):
        loop._step()
    assert context.decoded == [
        [(5, 0, False), (6, 1, False), (7, 2, False), (8, 3, True)],  # the interactive prompt, without the lines
        [(3, 4, True)],  # its first decode step alone: the pace measures it
        [(3, 4, True), (3, 4, True), (3, 5, True)],  # then the batch lines decode beside it (within the share)
    ]
