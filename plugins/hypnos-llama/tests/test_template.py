"""Chat templates render in a sandbox with the HF helpers."""

from __future__ import annotations

import pytest
from hypnos.chat import ChatInput, InputMessage, TextPart
from hypnos.openai import ToolCall, ToolCallFunction
from hypnos_llama.template import CHATML_FALLBACK, ChatTemplate, TemplateError


def ChatMessage(role: str, content: str | None = None, tool_calls: list[ToolCall] | None = None) -> InputMessage:
    return InputMessage(role=role, parts=[TextPart(text=content)] if content else [], tool_calls=tool_calls or [])


def _request(*messages: InputMessage) -> ChatInput:
    return ChatInput(messages=list(messages), max_tokens=16)


def test_chatml_renders_with_generation_prompt() -> None:
    text = ChatTemplate(CHATML_FALLBACK).render(_request(ChatMessage(role="user", content="hi")))
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_helpers_bos_eos_and_raise_exception() -> None:
    source = (
        "{{ bos_token }}{% if messages|length > 1 %}{{ raise_exception('one only') }}{% endif %}"
        "{{ strftime_now('%Y') }}{{ eos_token }}"
    )
    template = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    text = template.render(_request(ChatMessage(role="user", content="a")))
    assert text.startswith("<s>2") and text.endswith("</s>")
    with pytest.raises(TemplateError) as caught:
        template.render(_request(ChatMessage(role="user", content="a"), ChatMessage(role="user", content="b")))
    assert caught.value.status == 400


def test_sandbox_refuses_unsafe_attribute_access() -> None:
    template = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(TemplateError):
        template.render(_request(ChatMessage(role="user", content="a")))


def test_tool_call_arguments_reach_the_template_as_objects() -> None:
    template = ChatTemplate(
        "{% for m in messages %}{% for c in m.tool_calls or [] %}"
        "{{ c.function.arguments.city }}{% endfor %}{% endfor %}"
    )
    call = ToolCall(id="c1", function=ToolCallFunction(name="weather", arguments='{"city": "Paris"}'))
    text = template.render(_request(ChatMessage(role="assistant", content=None, tool_calls=[call])))
    assert text == "Paris"


# A template in the style of Gemma's and Mistral's: a system message only first, any other role order refused.
FIRST_SYSTEM_ONLY = (
    "{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}{% set rest = messages[1:] %}"
    "{% else %}{% set system = '' %}{% set rest = messages %}{% endif %}"
    "[SYS]{{ system }}[/SYS]"
    "{% for message in rest %}{% if message['role'] == 'system' %}{{ raise_exception('system only first') }}"
    "{% endif %}<{{ message['role'] }}>{{ message['content'] }}{% endfor %}<assistant>"
)
# A template that renders user and assistant turns only (a later system message would be lost without a word).
TURNS_ONLY = (
    "{% for message in messages %}{% if message['role'] in ['user', 'assistant'] %}"
    "<{{ message['role'] }}>{{ message['content'] }}{% endif %}{% endfor %}<assistant>"
)


def test_a_system_message_after_the_models_first_turn_stands_where_it_is_when_the_template_renders_it() -> None:
    request = _request(
        ChatMessage(role="system", content="S1"),
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", content="hello"),
        ChatMessage("system", "S2"),
        ChatMessage(role="user", content="bye"),
    )
    text = ChatTemplate(CHATML_FALLBACK).render(request)
    assert text.index("S1") < text.index("hi") < text.index("hello") < text.index("<|im_start|>system\nS2")
    assert text.index("S2") < text.index("bye")


def test_system_messages_before_the_models_first_turn_join_the_system_prompt_in_order() -> None:
    """Claude Code sends its environment block as a system message after the user's task, Codex two developer
    messages: before the model's first turn they are its system prompt, which the template follows with the tools
    (rendered after the task, the 0.5B starter repeated the block word for word; rendered between the tools and the
    task, it answered in words where it should have called a tool)."""
    request = _request(
        ChatMessage(role="system", content="S1"),
        ChatMessage(role="user", content="task"),
        ChatMessage("system", "env"),
        ChatMessage("developer", "dev"),
    )
    template = ChatTemplate(CHATML_FALLBACK)
    opening = "<|im_start|>system\nS1\n\nenv\n\ndev<|im_end|>\n"
    assert template.render(request) == opening + "<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\n"
    later = _request(*request.messages, ChatMessage("assistant", "ok"), ChatMessage("user", "more"))
    assert template.render(later).startswith(opening + "<|im_start|>user\ntask<|im_end|>\n")  # the same prefix
    alone = template.render(_request(ChatMessage("user", "task"), ChatMessage("system", "env")))
    assert alone == "<|im_start|>system\nenv<|im_end|>\n<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\n"


def test_system_messages_after_the_last_turn_of_a_later_exchange_go_before_it() -> None:
    request = _request(
        ChatMessage(role="system", content="S1"),
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", content="ok"),
        ChatMessage(role="user", content="task"),
        ChatMessage("system", "env"),
        ChatMessage("developer", "dev"),
    )
    text = ChatTemplate(CHATML_FALLBACK).render(request)
    assert text.index("ok") < text.index("<|im_start|>system\nenv") < text.index("dev") < text.index("task")
    assert text.endswith("<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\n")


def test_a_template_that_refuses_or_drops_a_later_system_message_gets_them_folded_in_order() -> None:
    request = _request(
        ChatMessage(role="system", content="S1"),
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="developer", content="S2"),
        ChatMessage(role="assistant", content="ok"),
        ChatMessage(role="system", content="S3"),
    )
    assert (
        ChatTemplate(FIRST_SYSTEM_ONLY).render(request) == "[SYS]S1\n\nS2\n\nS3[/SYS]<user>hi<assistant>ok<assistant>"
    )
    assert ChatTemplate(TURNS_ONLY).render(request) == "<user>hi<assistant>ok<assistant>"  # no system to fold into
    with_system = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    dropping = "{% if messages[0]['role'] == 'system' %}[{{ messages[0]['content'] }}]{% endif %}" + TURNS_ONLY
    assert ChatTemplate(dropping).render(request) == "[S1\n\nS2\n\nS3]<user>hi<assistant>ok<assistant>"
    assert ChatTemplate(with_system).render(request) == "<system>S1\n\nS2<user>hi<assistant>ok<system>S3"


def test_a_template_that_refuses_something_else_still_fails() -> None:
    refusing = "{{ raise_exception('no') }}"
    with pytest.raises(TemplateError):
        ChatTemplate(refusing).render(_request(ChatMessage(role="user", content="a"), ChatMessage("system", "b")))
