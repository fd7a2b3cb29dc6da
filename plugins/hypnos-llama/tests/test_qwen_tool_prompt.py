"""The prompt of a tool round trip on the Qwen starter is byte-identical to the GGUF's own chat template rendered as
transformers' apply_chat_template renders it (jinja2, the same environment and helpers)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypnos.config import LimitsConfig
from hypnos.openai import ChatCompletionRequest
from hypnos_llama.chat_plan import plan_chat
from hypnos_llama.gguf_meta import read_gguf
from hypnos_llama.template import ChatTemplate
from hypnos_server.routes.chat_input import chat_completion_request

from .conftest import QWEN_FILE
from .qwen_openai import WEATHER

pytestmark = pytest.mark.model
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS = {
    # what the OpenAI Python SDK sends back: content null, the arguments a JSON string
    "one_call": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_1", "get_weather", '{"city": "Paris"}')]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21, "condition": "sunny"}'},
    ],
    # the Node SDK and `llm`: content "", a system prompt, text parts, two calls and their results, a further turn
    "two_calls_and_a_follow_up": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Zürich, and the time?"}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("c1", "get_weather", '{"city":"Zürich"}'), call("c2", "get_time", "{}")],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": '{"temp_c": 9}'}]},
        {"role": "tool", "tool_call_id": "c2", "content": "12:30"},
        {"role": "assistant", "content": "9 °C, 12:30."},
        {"role": "user", "content": "And in Oslo?"},
    ],
}


def transformers_render(source: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """apply_chat_template's rendering (transformers' chat_template_utils): its environment, its helpers, the text
    of each message and the arguments as objects (what transformers documents for a tool call)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False):  # type: ignore[no-untyped-def]
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    plain = []
    for message in json.loads(json.dumps(messages)):
        if isinstance(message.get("content"), list):
            message["content"] = "".join(part["text"] for part in message["content"])
        for tool_call in message.get("tool_calls") or []:
            tool_call["function"]["arguments"] = json.loads(tool_call["function"]["arguments"])
        plain.append(message)
    return environment.from_string(source).render(
        messages=plain, tools=tools, add_generation_prompt=True, bos_token="", eos_token="<|im_end|>"
    )


def hypnos_render(source: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """What the llama engine renders: the wire body checked by the server, the request's plan, the template."""
    body = msgspec.json.decode(
        json.dumps({"model": "qwen2.5:0.5b", "messages": messages, "tools": tools}), type=ChatCompletionRequest
    )
    request = chat_completion_request(body, LimitsConfig()).chat
    plan = plan_chat(source, request, "qwen2.5:0.5b", constrained=False)
    template = ChatTemplate(source, bos_token="", eos_token="<|im_end|>")
    return plan.finish_prompt(template.render(plan.render_request(request), extra=plan.template_variables))


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_a_tool_round_trip_renders_as_the_model_s_own_template(qwen_models_dir: Path, name: str) -> None:
    source = read_gguf(qwen_models_dir / QWEN_FILE).chat_template
    assert source is not None and "<tool_response>" in source
    messages, tools = CONVERSATIONS[name], [WEATHER, TIME]
    ours = hypnos_render(source, messages, tools)
    assert ours == transformers_render(source, messages, tools)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": ' in ours
    assert ours.count("<tool_response>") == sum(message["role"] == "tool" for message in messages)
