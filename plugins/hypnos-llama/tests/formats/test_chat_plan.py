"""Per-request plans: tools hidden or forced, 400 without a tool format, thinking budgets and closing."""

from __future__ import annotations

import json

import pytest
from hypnos.engine import ContentDelta, ReasoningDelta, ToolCallEvent
from hypnos.errors import HypnosError
from hypnos.openai import (
    FunctionDefinition,
    ToolChoiceFunction,
    ToolChoiceObject,
    ToolDefinition,
)
from hypnos_llama.chat_plan import plan_chat
from hypnos_llama.testing import chat_request

QWEN = "{% if tools %}<tools></tools> <tool_call>{% endif %}<|im_start|>assistant\n"
THINKER = QWEN + "{% if enable_thinking %}<think>\n{% else %}<think>\n\n</think>\n\n{% endif %}</think>"
PLAIN = "<|im_start|>assistant\n"
TOOLS = [ToolDefinition(function=FunctionDefinition(name="get_weather", parameters={"type": "object"}))]


def _request(**fields):
    return chat_request("hi", max_tokens=8, **fields)


def _events(splitter, text):
    return splitter.feed(text) + splitter.finish()


def test_tools_on_a_model_without_a_format_are_refused() -> None:
    with pytest.raises(HypnosError) as caught:
        plan_chat(PLAIN, _request(tools=TOOLS))
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"


def test_tool_choice_none_hides_tools_even_without_a_format() -> None:
    plan = plan_chat(PLAIN, _request(tools=TOOLS, tool_choice="none"))
    assert plan.hide_tools and plan.tool_format is None
    assert plan.render_request(_request(tools=TOOLS)).tools == []


def test_required_and_named_calls_are_forced_and_parsed() -> None:
    required = plan_chat(QWEN, _request(tools=TOOLS, tool_choice="required"))
    assert required.finish_prompt("P").endswith('<tool_call>\n{"name": "')
    events = _events(required.output_parser(required.finish_prompt("P")), 'get_weather", "arguments": {}}')
    assert [e.call.function.name for e in events if isinstance(e, ToolCallEvent)] == ["get_weather"]
    named_choice = ToolChoiceObject(function=ToolChoiceFunction(name="get_weather"))
    named = plan_chat(QWEN, _request(tools=TOOLS, tool_choice=named_choice))
    prompt = named.finish_prompt("P")
    assert prompt.endswith('"get_weather", "arguments": ')
    events = _events(named.output_parser(prompt), '{"city": "Paris"}}\n</tool_call>')
    calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert not [e for e in events if isinstance(e, ContentDelta)]


def test_a_forced_call_that_repeats_the_answered_call_is_still_a_call() -> None:
    """After a tool result, `auto` reads the answered call written again as text (the small models' echo); with
    `required` (LangChain's ToolStrategy, Anthropic's `any`) the client asked for a call, so it stays one."""
    from hypnos.chat import InputMessage, TextPart
    from hypnos.openai import ToolCall, ToolCallFunction
    from hypnos_llama.testing import chat_input

    call = ToolCall(id="call_1", function=ToolCallFunction(name="get_weather", arguments='{"city": "Paris"}'))
    messages = [
        InputMessage(role="user", parts=[TextPart(text="Weather in Paris?")]),
        InputMessage(role="assistant", tool_calls=[call]),
        InputMessage(role="tool", parts=[TextPart(text="Sunny, 22C")], tool_call_id="call_1"),
    ]
    repeated = 'get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    auto = plan_chat(QWEN, chat_input(messages, tools=TOOLS, max_tokens=8))
    events = _events(auto.output_parser(auto.finish_prompt("P")), '<tool_call>\n{"name": "' + repeated)
    assert not [e for e in events if isinstance(e, ToolCallEvent)]
    required = plan_chat(QWEN, chat_input(messages, tools=TOOLS, tool_choice="required", max_tokens=8))
    events = _events(required.output_parser(required.finish_prompt("P")), repeated)
    assert [e.call.function.name for e in events if isinstance(e, ToolCallEvent)] == ["get_weather"]
    assert not [e for e in events if isinstance(e, ContentDelta) and e.text.strip()]


def test_auto_leaves_the_answer_free() -> None:
    plan = plan_chat(QWEN, _request(tools=TOOLS))
    assert plan.forced_prefix == "" and plan.tool_format is not None and plan.tool_format.name == "hermes"


@pytest.mark.parametrize(
    ("effort", "think", "budget", "on"),
    [(None, None, 0, False), (None, True, None, True), ("none", True, 0, False), ("low", None, 512, True)],
)
def test_thinking_budgets(effort, think, budget, on) -> None:
    thinking = bool(think) if effort is None else effort != "none"  # as the server decides it
    plan = plan_chat(THINKER, _request(thinking=thinking, thinking_budget=512 if effort == "low" else None))
    assert plan.thinking_budget == budget and plan.thinking_on is on
    assert plan.template_variables["enable_thinking"] is on


def test_budget_zero_closes_a_block_the_template_opened() -> None:
    plan = plan_chat(THINKER, _request(thinking=False))
    prompt = plan.finish_prompt("...<|im_start|>assistant\n<think>\n")
    assert prompt.endswith("</think>\n\n")
    events = _events(plan.output_parser(prompt), "Paris.")
    assert [type(e) for e in events] == [ContentDelta]


def test_thinking_prompt_starts_the_parser_in_reasoning() -> None:
    plan = plan_chat(THINKER, _request(thinking=True))
    prompt = plan.finish_prompt("<|im_start|>assistant\n<think>\n")
    events = _events(plan.output_parser(prompt), "ponder</think>\n\nParis.")
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "ponder"
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "Paris."


def test_forced_call_on_a_thinking_model_skips_thinking() -> None:
    plan = plan_chat(THINKER, _request(tools=TOOLS, tool_choice="required", thinking=True))
    assert plan.thinking_budget == 0 and plan.template_variables["enable_thinking"] is False
    prompt = plan.finish_prompt("assistant\n<think>\n")
    assert prompt.endswith('</think>\n\n<tool_call>\n{"name": "')


def test_worker_guard_closes_at_the_budget_in_either_opening() -> None:
    from hypnos_llama.chat_plan import ThinkingGuard
    from hypnos_llama.formats.thinking import THINK_TAGS

    opened_by_prompt = ThinkingGuard(THINK_TAGS, 3, [9, 9], in_reasoning=True)
    assert [opened_by_prompt.after_text(t) for t in ["a", "b"]] == [None, None]
    assert opened_by_prompt.after_text("c") == ([9, 9], THINK_TAGS.close_text)
    assert opened_by_prompt.after_text("d") is None  # closes once

    opened_by_model = ThinkingGuard(THINK_TAGS, 1, [9], in_reasoning=False)
    assert opened_by_model.after_text("<thi") is None
    assert opened_by_model.after_text("nk>") == ([9], THINK_TAGS.close_text)

    closes_itself = ThinkingGuard(THINK_TAGS, 5, [9], in_reasoning=True)
    assert [closes_itself.after_text(t) for t in ["x", "</think>", "y", "z", "w", "v"]] == [None] * 6

    answers_at_once = ThinkingGuard(THINK_TAGS, 0, [9], in_reasoning=False)
    assert [answers_at_once.after_text(t) for t in ["Paris", "<think>"]] == [None, None]
