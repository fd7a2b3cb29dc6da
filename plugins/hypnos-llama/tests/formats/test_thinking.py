"""Thinking blocks: thoughts become reasoning deltas before the answer; delimiters never reach the content."""

from __future__ import annotations

import pytest
from hypnos.engine import ContentDelta, ReasoningDelta, ToolCallEvent
from hypnos_llama.formats import OutputSplitter, detect_thinking_format, detect_tool_format
from hypnos_llama.formats.thinking import THINK_TAGS


def _run(splitter: OutputSplitter, pieces: list[str]):
    events = []
    for piece in pieces:
        events += splitter.feed(piece)
    return events + splitter.finish()


def _texts(events, kind):
    return "".join(e.text for e in events if isinstance(e, kind))


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_thoughts_then_answer(size) -> None:
    output = "<think>\nThe user asks for the capital.\n</think>\n\nParis."
    pieces = [output[i : i + size] for i in range(0, len(output), size)]
    events = _run(OutputSplitter(thinking=THINK_TAGS), pieces)
    assert _texts(events, ReasoningDelta) == "The user asks for the capital.\n"
    assert _texts(events, ContentDelta) == "Paris."
    kinds = [type(e) for e in events]
    assert kinds.index(ContentDelta) > max(i for i, k in enumerate(kinds) if k is ReasoningDelta)


def test_block_opened_by_the_prompt() -> None:
    events = _run(OutputSplitter(thinking=THINK_TAGS, in_reasoning=True), ["hmm", " ok</th", "ink>\n\nDone"])
    assert _texts(events, ReasoningDelta) == "hmm ok"
    assert _texts(events, ContentDelta) == "Done"


def test_unclosed_thoughts_stay_reasoning() -> None:
    events = _run(OutputSplitter(thinking=THINK_TAGS, in_reasoning=True), ["a b c <"])
    assert _texts(events, ReasoningDelta) == "a b c <"
    assert _texts(events, ContentDelta) == ""


def test_thoughts_then_tool_call() -> None:
    template = "<think></think><tool_call>"
    splitter = OutputSplitter(detect_tool_format(template), detect_thinking_format(template))
    events = _run(splitter, ['<think>need weather</think>\n<tool_call>{"name": "w", "arguments": {}}</tool_call>'])
    assert _texts(events, ReasoningDelta) == "need weather"
    assert [e.call.function.name for e in events if isinstance(e, ToolCallEvent)] == ["w"]
    assert _texts(events, ContentDelta) == ""


def test_think_tag_after_the_answer_started_is_text() -> None:
    events = _run(OutputSplitter(thinking=THINK_TAGS), ["Use <think> tags."])
    assert _texts(events, ContentDelta) == "Use <think> tags."


def test_detect_thinking_format() -> None:
    assert detect_thinking_format("{{ '<think>' }}...{{ '</think>' }}") is THINK_TAGS
    assert detect_thinking_format("<|im_start|>") is None
