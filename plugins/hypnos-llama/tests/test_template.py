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
