"""Tool-call parsing per family, from outputs as the models write them (well-formed and malformed)."""

from __future__ import annotations

import json

import pytest
from hypnos.engine import ContentDelta, ToolCallEvent
from hypnos_llama.formats import OutputSplitter, detect_tool_format
from hypnos_llama.formats.splitter import split_text
from hypnos_llama.formats.tool_formats import FAMILIES

BY_NAME = {family.name: family for family in FAMILIES}

# (family, model output, expected text, expected [(name, arguments)])
CASES = [
    (
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        "hermes",
        'Let me check.\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": "{\\"x\\": 1}"}\n</tool_call>',
        "Let me check.",
        [("a", {}), ("b", {"x": 1})],
    ),
    # The small Qwen 2.5 writes calls in a json code block.
    (
        "hermes",
        '```json\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n```',
        "",
        [("get_weather", {"city": "Paris", "unit": "celsius"})],
    ),
    # ... or in a fence of another info string, or none (Claude Code's prompt draws ```markdown from the 0.5B starter)
    (
        "hermes",
        '```markdown\n{\n  "name": "Read",\n  "arguments": {\n    "file_path": "hello.txt"\n  }\n}\n```\n',
        "",
        [("Read", {"file_path": "hello.txt"})],
    ),
    ("hermes", '```\n[{"name": "a", "arguments": {}}]\n```', "", [("a", {})]),
    # A code block that opens the answer and holds no call stays text.
    ("hermes", '```python\nprint({"name": 1})\n```', '```python\nprint({"name": 1})\n```', []),
    # A json code block that is not a call stays text.
    ("hermes", 'Here:\n```json\n{"a": 1}\n```', 'Here:\n```json\n{"a": 1}\n```', []),
    # Malformed JSON in a call region becomes text, never an error.
    (
        "hermes",
        '<tool_call>{"name": "x", "arguments": {</tool_call>',
        '<tool_call>{"name": "x", "arguments": {</tool_call>',
        [],
    ),
    # Unclosed but complete call at the end of output still parses.
    ("hermes", '<tool_call>\n{"name": "x", "arguments": {"q": "y"}}', "", [("x", {"q": "y"})]),
    (
        "qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        "</function>\n</tool_call>",
        "",
        [("get_weather", {"city": "Paris", "days": 3})],
    ),
    (
        "glm",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    ("glm", "<tool_call>\n</tool_call>", "<tool_call>\n</tool_call>", []),
    (
        "lfm",
        '<|tool_call_start|>[get_weather(city="Paris", days=2), get_time(zone="CET")]<|tool_call_end|>Checking.',
        "Checking.",
        [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {"zone": "CET"})],
    ),
    (
        "lfm",
        "<|tool_call_start|>[get_weather(city=]<|tool_call_end|>",
        "<|tool_call_start|>[get_weather(city=]<|tool_call_end|>",
        [],
    ),
    (
        "nemotron",
        '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>',
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        "mistral",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "", [("get_weather", {"city": "Paris"})]),
    ("mistral", "[TOOL_CALLS]oops", "[TOOL_CALLS]oops", []),
    (
        "gemma",
        "<start_function_call>call:get_weather{city:<escape>Paris, FR<escape>,days:3}<end_function_call>",
        "",
        [("get_weather", {"city": "Paris, FR", "days": 3})],
    ),
    (
        "llama3",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    ("hermes", "Paris is the capital of France.", "Paris is the capital of France.", []),
    # Qwen2.5-Coder-0.5B's bare JSON calls (issue 40): an answer that is a call, alone or in a list, is a call (any
    # family).
    (
        "hermes",
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        "",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        "hermes",
        ' \n[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]\n',
        "",
        [("a", {}), ("b", {"x": 1})],
    ),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [("get_weather", {"city": "Paris"})]),
    # JSON that is not a call, or a call not at the answer's start, stays text.
    ("hermes", '{"city": "Paris"}', '{"city": "Paris"}', []),
    ("hermes", '{"name": "Tom", "age": 3', '{"name": "Tom", "age": 3', []),
    # An object with a "name" and keys no call has is data (an answer under a response_format schema whose name
    # happens to be a tool's), in a call region too; a call's own `type` and `id` are no such keys.
    (
        "hermes",
        '{"name": "get_weather", "country": "France"}',
        '{"name": "get_weather", "country": "France"}',
        [],
    ),
    (
        "hermes",
        '[{"name": "a", "arguments": {}}, {"name": "b", "x": 1}]',
        '[{"name": "a", "arguments": {}}, {"name": "b", "x": 1}]',
        [],
    ),
    (
        "hermes",
        '<tool_call>\n{"type": "function", "id": "call_1", "name": "a", "arguments": {"q": 1}}\n</tool_call>',
        "",
        [("a", {"q": 1})],
    ),
    ("hermes", 'Call {"name": "a", "arguments": {}}', 'Call {"name": "a", "arguments": {}}', []),
    ("nemotron", '{"name": "a", "arguments": {}}', "", [("a", {})]),
]


def _expected(calls):
    return [(name, args) for name, args in calls]


@pytest.mark.parametrize(("family", "output", "text", "calls"), CASES)
def test_whole_output_parses(family, output, text, calls) -> None:
    content, parsed = split_text(BY_NAME[family], output)
    assert content == text
    assert [(c.name, json.loads(c.arguments)) for c in parsed] == _expected(calls)


@pytest.mark.parametrize(("family", "output", "text", "calls"), CASES)
def test_streamed_one_character_at_a_time_gives_the_same_result(family, output, text, calls) -> None:
    splitter = OutputSplitter(BY_NAME[family], call_id_prefix="call_abc")
    events = []
    for character in output:
        events += splitter.feed(character)
    events += splitter.finish()
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == text
    tool_events = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [(e.call.function.name, json.loads(e.call.function.arguments)) for e in tool_events] == _expected(calls)
    assert [e.call.id for e in tool_events] == [f"call_abc_{n}" for n in range(1, len(calls) + 1)]


@pytest.mark.parametrize(
    ("template", "family"),
    [
        ("{% for tool in tools %}<tool_call>{{ tool }}</tool_call>{% endfor %}", "hermes"),
        ("<tool_call>\n<function={{ name }}>\n<parameter=x>", "qwen3_coder"),
        ("<tool_call>{{ name }}<arg_key>k</arg_key>", "glm"),
        ("<|tool_call_start|>[...]<|tool_call_end|>", "lfm"),
        ("<TOOLCALL>[...]</TOOLCALL>", "nemotron"),
        ("[AVAILABLE_TOOLS][TOOL_CALLS]", "mistral"),
        ("<start_function_call>call:", "gemma"),
        ("<|python_tag|>", "llama3"),
    ],
)
def test_family_detected_from_chat_template(template, family) -> None:
    detected = detect_tool_format(template)
    assert detected is not None and detected.name == family


def test_template_without_tool_markers_has_no_format() -> None:
    assert detect_tool_format("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}") is None
    assert detect_tool_format(None) is None


@pytest.mark.parametrize("family", sorted(BY_NAME))
def test_forced_prefix_followed_by_the_rest_of_a_call_parses(family) -> None:
    """What the engine starts the answer with, plus what a model writes next, is one call."""
    rest = {
        "hermes": '{"city": "Paris"}}\n</tool_call>',
        "qwen3_coder": "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        "glm": "<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
        "lfm": 'city="Paris")]<|tool_call_end|>',
        "nemotron": '{"city": "Paris"}}]</TOOLCALL>',
        "mistral": '{"city": "Paris"}',
        "gemma": "city:<escape>Paris<escape>}<end_function_call>",
        "llama3": '{"city": "Paris"}}',
    }[family]
    content, calls = split_text(BY_NAME[family], BY_NAME[family].forced_prefix("get_weather") + rest)
    assert content == ""
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]


def test_a_call_to_an_undeclared_function_never_comes_back_as_a_call() -> None:
    output = '<tool_call>\n{"name": "delete_everything", "arguments": {}}\n</tool_call>'
    splitter = OutputSplitter(BY_NAME["hermes"], tool_names=frozenset({"get_weather"}))
    events = splitter.feed(output) + splitter.finish()
    assert not any(isinstance(event, ToolCallEvent) for event in events)
    text = "".join(event.text for event in events if isinstance(event, ContentDelta))
    assert "delete_everything" in text and "<tool_call>" not in text
    declared = OutputSplitter(BY_NAME["hermes"], tool_names=frozenset({"delete_everything"}))
    assert any(isinstance(event, ToolCallEvent) for event in declared.feed(output) + declared.finish())


def test_a_declared_name_in_another_letter_case_comes_back_as_the_declared_name() -> None:
    output = '```json\n{"name": "Read", "arguments": {"filePath": "hello.txt"}}\n```'
    splitter = OutputSplitter(BY_NAME["hermes"], tool_names=frozenset({"read", "write"}))
    calls = [event.call for event in splitter.feed(output) + splitter.finish() if isinstance(event, ToolCallEvent)]
    assert [(call.function.name, json.loads(call.function.arguments)) for call in calls] == [
        ("read", {"filePath": "hello.txt"})
    ]
    twins = OutputSplitter(BY_NAME["hermes"], tool_names=frozenset({"read", "READ"}))  # which one is meant: neither
    assert not any(isinstance(event, ToolCallEvent) for event in twins.feed(output) + twins.finish())


def test_a_declared_name_with_a_tail_comes_back_as_the_declared_name() -> None:
    output = '```markdown\n{"name": "read-file", "arguments": {"file_path": "hello.txt"}}\n```'
    splitter = OutputSplitter(BY_NAME["hermes"], tool_names=frozenset({"Read", "Write"}))
    calls = [event.call for event in splitter.feed(output) + splitter.finish() if isinstance(event, ToolCallEvent)]
    assert [(call.function.name, json.loads(call.function.arguments)) for call in calls] == [
        ("Read", {"file_path": "hello.txt"})
    ]
    # `read_file` is declared too: `read-file` could mean either, and is neither
    both = OutputSplitter(BY_NAME["hermes"], tool_names=frozenset({"Read", "read_file"}))
    assert not any(isinstance(event, ToolCallEvent) for event in both.feed(output) + both.finish())


def test_an_echo_of_the_answered_call_is_text() -> None:
    """After a tool result the 0.5B model echoes the call it made: that call is text, another call is a call."""
    echoes = frozenset({("get_weather", '{"city":"Paris"}')})
    echo = '{"name": "get_weather", "arguments": {"city": "Paris"}}\n{"temperature_c": 18}'
    splitter = OutputSplitter(BY_NAME["hermes"], tool_names=frozenset({"get_weather"}), echoes=echoes)
    events = splitter.feed(echo) + splitter.finish()
    assert not any(isinstance(event, ToolCallEvent) for event in events)
    assert "".join(event.text for event in events if isinstance(event, ContentDelta)) == echo
    other = OutputSplitter(BY_NAME["hermes"], tool_names=frozenset({"get_weather"}), echoes=echoes)
    events = other.feed('{"name": "get_weather", "arguments": {"city": "Oslo"}}') + other.finish()
    assert any(isinstance(event, ToolCallEvent) for event in events)
