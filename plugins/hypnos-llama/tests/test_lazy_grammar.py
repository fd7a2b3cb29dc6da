"""The lazy call grammar on the tiny model's vocabulary: free text until a trigger, then the grammar holds from the
trigger's first token on; a trigger whose text the grammar refuses is dropped, never fed to llama.cpp."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypnos.openai import FunctionDefinition, ToolDefinition
from hypnos_llama.chat_plan import plan_chat
from hypnos_llama.grammar import request_grammar
from hypnos_llama.lazy_grammar import LazyGrammar
from hypnos_llama.testing import chat_request
from hypnos_llama.tool_grammar import BARE_TRIGGER

WEATHER = ToolDefinition(
    function=FunctionDefinition(
        name="get_weather",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
)
QWEN_TEMPLATE = "{% for tool in tools %}<tool_call>{{ tool }}</tool_call>{% endfor %}"


@pytest.fixture(scope="module")
def model(tiny_gguf: Path) -> Iterator[Any]:
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaModel

    loaded = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    yield loaded
    loaded.close()


def _tokens(model: Any, text: str) -> list[int]:
    """`text`'s tokens without the space-prefix marker the tiny vocabulary puts first (its spaces are "\u2581": the
    texts below write none where the grammar decides)."""
    tokens = model.tokenize(text, add_special=False, parse_special=False)
    marker = "\u2581".encode()
    for count in range(1, len(tokens) + 1):
        if b"".join(model.piece(token) for token in tokens[:count]) == marker:
            return tokens[count:]
    return tokens


def _feed(lazy: LazyGrammar, model: Any, text: str) -> Any:
    """Accept `text`'s tokens one by one; once triggered, the rest goes to the grammar sampler (which must take
    it), as SlotSampler does. The sampler (None if never triggered)."""
    tokens = _tokens(model, text)
    for index, token in enumerate(tokens):
        sampler = lazy.accept(token)
        if sampler is not None:
            assert _take(model, sampler, tokens[index + 1 :])
            return sampler
    return None


def _allows(model: Any, sampler: Any, text: str) -> bool:
    """Whether the grammar takes `text` next, token by token (accepting what it takes)."""
    return _take(model, sampler, _tokens(model, text))


def _allowed_after(model: Any, constraint: Any, opening: str, text: str) -> bool:
    """Whether the lazy grammar, triggered by `opening`, takes `text` next."""
    sampler = _feed(LazyGrammar(model, constraint.grammar, constraint.triggers), model, opening)
    assert sampler is not None
    try:
        return _allows(model, sampler, text)
    finally:
        model.lib.llama_sampler_free(sampler)


def _take(model: Any, sampler: Any, tokens: list[int]) -> bool:
    lib = model.lib
    for token in tokens:
        one = (lib.llama_token_data * 1)()
        one[0].id, one[0].logit, one[0].p = token, 1.0, 0.0
        lib.llama_sampler_apply(sampler, ctypes.byref(lib.llama_token_data_array(one, 1, -1, False)))
        if one[0].logit == float("-inf"):
            return False
        lib.llama_sampler_accept(sampler, token)
    return True


def _auto_grammar() -> Any:
    request = chat_request("What's the weather in Paris?", tools=[WEATHER])
    plan = plan_chat(QWEN_TEMPLATE, request)
    assert plan.tool_format is not None and plan.tool_format.name == "hermes"
    return request_grammar(plan.tool_format.name, request, forced=False)


def test_free_text_until_the_opener_then_only_a_declared_call(model: Any) -> None:
    constraint = _auto_grammar()
    assert constraint is not None and constraint.triggers
    lazy = LazyGrammar(model, constraint.grammar, constraint.triggers)
    assert _feed(lazy, model, "Let me look that up for you. ") is None
    sampler = _feed(lazy, model, '<tool_call>\n{"name":"get_')
    assert sampler is not None
    try:
        # a declared function's arguments follow its schema (`city` required, first)
        assert not _allows(model, sampler, 'weather","arguments":{"town"')
    finally:
        model.lib.llama_sampler_free(sampler)
    lazy = LazyGrammar(model, constraint.grammar, constraint.triggers)
    sampler = _feed(lazy, model, '<tool_call>\n{"name":"get_')
    try:
        assert _allows(model, sampler, 'weather","arguments":{"city":"Paris"}}\n</tool_call>')
    finally:
        model.lib.llama_sampler_free(sampler)
    # after the opener the name is a declared one: a call of another function never comes out
    for other in ('time"', 'weatherman"'):
        lazy = LazyGrammar(model, constraint.grammar, constraint.triggers)
        sampler = _feed(lazy, model, '<tool_call>\n{"name":"get_')
        try:
            assert not _allows(model, sampler, other)
        finally:
            model.lib.llama_sampler_free(sampler)


def test_a_declared_name_in_another_letter_case_is_that_function_s_call(model: Any) -> None:
    """The 0.5B wrote Claude Code's `Read` for opencode's (Kilo Code's) `read`, and the call was text: the grammar
    takes the name in another letter case (the splitter gives the declared name back); two declared names that
    differ only in case keep their own spelling."""
    read = ToolDefinition(
        function=FunctionDefinition(
            name="read", parameters={"type": "object", "properties": {"filePath": {"type": "string"}}}
        )
    )
    request = chat_request("Read hello.txt", tools=[read, WEATHER])
    constraint = request_grammar(plan_chat(QWEN_TEMPLATE, request).tool_format.name, request, forced=False)
    for name in ('Read"', 'read"', 'Get_weather"'):
        assert _allowed_after(model, constraint, '<tool_call>\n{"name":"', name)
    assert not _allowed_after(model, constraint, '<tool_call>\n{"name":"', 'READ_FILE"')
    twins = ToolDefinition(function=FunctionDefinition(name="Read", parameters={"type": "object"}))
    request = chat_request("Read hello.txt", tools=[read, twins])
    constraint = request_grammar(plan_chat(QWEN_TEMPLATE, request).tool_format.name, request, forced=False)
    assert not _allowed_after(model, constraint, '<tool_call>\n{"name":"', 'rEAD"')


def test_a_declared_name_with_a_tail_is_that_function_s_call(model: Any) -> None:
    """On Claude Code's first request the 0.5B wrote `{"name": "read-file", ...}` in a ```markdown fence for its
    `Read`, and the call was text: the grammar takes a declared name followed by a separator and words, unless
    another declared name begins with that name and a separator (the tail could be that one's)."""
    read = ToolDefinition(
        function=FunctionDefinition(
            name="Read", parameters={"type": "object", "properties": {"file_path": {"type": "string"}}}
        )
    )
    request = chat_request("Read hello.txt", tools=[read, WEATHER])
    constraint = request_grammar(plan_chat(QWEN_TEMPLATE, request).tool_format.name, request, forced=False)
    # a word may hold a dot (a file name: without auto memory, 2 of Claude Code's 29 misses were `read-hello.txt`
    # and `read-file-hello.txt`)
    for name in ('read-file"', 'Read_file"', 'read_text_file"', 'get_weather_now"', 'read-file-hello.txt"'):
        assert _allowed_after(model, constraint, '```markdown\n{"name":"', name), name
    for name in ('readfile"', 'read-"', 'read.txt"', 'read-.txt"', 'file_read"'):
        assert not _allowed_after(model, constraint, '```markdown\n{"name":"', name), name
    get = ToolDefinition(function=FunctionDefinition(name="get", parameters={"type": "object"}))
    request = chat_request("Get it", tools=[get, WEATHER])
    constraint = request_grammar(plan_chat(QWEN_TEMPLATE, request).tool_format.name, request, forced=False)
    assert not _allowed_after(model, constraint, '<tool_call>\n{"name":"', 'get_time"')
    assert _allowed_after(model, constraint, '<tool_call>\n{"name":"', 'get"')


def test_a_bare_json_call_at_the_answer_start_triggers_the_grammar(model: Any) -> None:
    constraint = _auto_grammar()
    lazy = LazyGrammar(model, constraint.grammar, constraint.triggers)
    sampler = _feed(lazy, model, '\n{"name":"get_weather"')
    assert sampler is not None
    try:
        assert not _allows(model, sampler, ',"arguments":{"town"')
    finally:
        model.lib.llama_sampler_free(sampler)
    late = LazyGrammar(model, constraint.grammar, constraint.triggers)
    assert _feed(late, model, 'Call it like {"name": "get_weather"}') is None  # not at the start: free text
    # the grammar holds from `{"name":` on, before the name: the model picks among the declared names (Codex CLI's
    # `read_file_hello_tx0` and Claude Code's `hello.txt` came out as text, and no tool ran)
    for name, allowed in (('say_hello"', False), ('get_weather"', True)):
        assert _allowed_after(model, constraint, '{"name":"', name) == allowed, name
    # in a code fence of any info string too (Claude Code's prompt draws ```markdown from the 0.5B starter), closed
    for opening in ('```markdown\n{"name":"', '```\n{"name":"'):
        for name, allowed in (('say_hello"', False), ('get_weather","arguments":{"city":"Oslo"}}\n```', True)):
            assert _allowed_after(model, constraint, opening, name) == allowed, (opening, name)


def test_a_trigger_the_grammar_refuses_is_dropped(model: Any) -> None:
    """The bare-JSON trigger fires on text the grammar refuses (a leading tab it does not allow): nothing is fed
    to llama.cpp (its own lazy sampler would abort the process), and the output stays free."""
    lazy = LazyGrammar(model, 'root ::= "{\\"name\\": \\"x\\"}"', (BARE_TRIGGER,))
    assert _feed(lazy, model, '\t{"name":"x"}') is None


REPORT = {
    "type": "object",
    "properties": {"temperature": {"type": "integer", "minimum": -60, "maximum": 60}},
    "required": ["temperature"],
    "additionalProperties": False,
}


def _fresh(model: Any, grammar: str) -> Any:
    sampler = model.lib.llama_sampler_init_grammar(model.vocab, grammar.encode(), b"root")
    assert sampler
    return sampler


def test_tools_with_a_schema_answer_allow_a_call_or_the_answer_from_the_first_token(model: Any) -> None:
    """Build 7: with tool_choice auto and a json_schema, the output is a call or an answer under the schema."""
    from hypnos.chat import ResponseFormat

    request = chat_request(
        "Weather in Paris?",
        tools=[WEATHER],
        response_format=ResponseFormat(type="json_schema", schema=REPORT, strict=True),
    )
    constraint = request_grammar("hermes", request, forced=False)
    assert constraint is not None and constraint.triggers == ()  # active from the first token
    for text, allowed in [
        ('<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>', True),
        ('{"name":"get_weather","arguments":{"city":"Paris"}}', True),
        ('{"temperature":18}', True),
        ('{"temperature":99}', False),  # outside the schema's bounds
        ("It is sunny.", False),
    ]:
        sampler = _fresh(model, constraint.grammar)
        try:
            assert _allows(model, sampler, text) == allowed, text
        finally:
            model.lib.llama_sampler_free(sampler)


def test_a_required_call_with_a_schema_is_held_by_the_call_grammar(model: Any) -> None:
    """Build 7: tool_choice required with a json_schema: after the forced prefix comes the call, not the schema."""
    from hypnos.chat import ResponseFormat

    request = chat_request(
        "Weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        response_format=ResponseFormat(type="json_schema", schema=REPORT, strict=True),
    )
    constraint = request_grammar("hermes", request, forced=True)
    assert constraint is not None
    for text, allowed in [
        ('get_weather"', True),  # the name, then the literal `", "arguments": ` (spaces the tiny vocabulary lacks)
        ('{"temperature":18}', False),
    ]:
        sampler = _fresh(model, constraint.grammar)
        try:
            assert _allows(model, sampler, text) == allowed, text
        finally:
            model.lib.llama_sampler_free(sampler)


# Claude Code's Read (integers up to 2^53 - 1, no other keys) and Workflow (an `args` schema of words only: any
# value) among its twelve tools: Workflow's schema once left every call of every tool unheld
READ = ToolDefinition(
    function=FunctionDefinition(
        name="Read",
        parameters={
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 0, "maximum": 9007199254740991},
            },
            "required": ["file_path"],
            "additionalProperties": False,
        },
    )
)
WORKFLOW = ToolDefinition(
    function=FunctionDefinition(
        name="Workflow",
        parameters={
            "type": "object",
            "properties": {"script": {"type": "string"}, "args": {"description": "Any input value for the script."}},
            "required": ["script"],
        },
    )
)
HUGE = ToolDefinition(
    function=FunctionDefinition(
        name="Write",
        parameters={"type": "object", "properties": {"content": {"type": "string", "maxLength": 2_000_000}}},
    )
)  # a bound past what a grammar holds


def test_a_tool_whose_schema_a_grammar_cannot_hold_leaves_the_others_held(model: Any) -> None:
    request = chat_request("Read hello.txt", tools=[READ, WORKFLOW, HUGE])
    plan = plan_chat(QWEN_TEMPLATE, request)
    assert plan.tool_format is not None
    constraint = request_grammar(plan.tool_format.name, request, forced=False)
    assert constraint is not None and constraint.triggers
    assert len(constraint.grammar) < 20_000  # 2^53 - 1 as digit ranges once made a 4 MB grammar
    cases = [
        ('Read","arguments":{"file_path":"hello.txt","offset":9007199254740991}}', True),
        ('Read","arguments":{"file_path":"hello.txt","offset":9007199254740992}', False),
        ('Read","arguments":{"file_path":"hello.txt","content":"', False),  # no other keys
        ('Workflow","arguments":{"script":"run()","args":[1,{"a":null}]}}', True),  # words only: any value
        ('Workflow","arguments":{"args":1}}', False),  # its schema still holds: `script` first, required
        ('Write","arguments":{"anything":[true]}}', True),  # past the limits: any object
        ('Agent"', False),  # names stay the declared ones
    ]
    for text, allowed in cases:
        assert _allowed_after(model, constraint, '<tool_call>\n{"name":"', text) == allowed, text
