"""A bare JSON call at the answer's start, on the real Qwen2.5-Coder-0.5B in-process (tool_choice auto, greedy): the
grammar holds it from `{"name":` on, so a call's name is a declared one; where the model's own name leaves the
declared ones and it gives them under `call_name_confidence`, the answer stays text."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos.engine import ToolCallEvent
from hypnos.openai import FunctionDefinition, ToolDefinition
from hypnos_llama.testing import chat_request, collect, make_engine, tier1

pytestmark = pytest.mark.model


def _tool(name: str, description: str, **properties: str) -> ToolDefinition:
    schema = {
        "type": "object",
        "properties": {k: {"type": v} for k, v in properties.items()},
        "required": [*properties],
    }
    return ToolDefinition(function=FunctionDefinition(name=name, description=description, parameters=schema))


TOOLS = [  # the tool_calls bench's six
    _tool("get_weather", "Current weather for a city", city="string"),
    _tool("get_time", "The current time in a time zone", zone="string"),
    _tool("get_stock_price", "The latest price of a stock ticker", ticker="string"),
    _tool("read_file", "Read a text file from disk", path="string"),
    _tool("send_email", "Send an email", to="string", subject="string", body="string"),
    _tool("search_web", "Search the web", query="string"),
]


async def _answers(models_dir: Path, name_floor: float, *prompts: str) -> list[tuple[str, list[str]]]:
    engine = make_engine(
        models_dir / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        slots=1,
        context_len=2048,
        llama={"n_threads": 2, "call_name_confidence": name_floor},
        model_id="qwen",
    )
    await engine.load(tier1(2048, 99))
    answers = []
    try:
        for prompt in prompts:
            request = chat_request(prompt, tools=TOOLS, tool_choice="auto", temperature=0)
            text, _, events = await collect(engine, request, max_tokens=48)
            answers.append((text, [e.call.function.name for e in events if isinstance(e, ToolCallEvent)]))
    finally:
        await engine.unload()
    return answers


async def test_a_bare_call_of_no_declared_function_is_text_and_a_declared_one_a_call(qwen_models_dir: Path) -> None:
    """The 0.5B starts "Say hello in French." as `{"name": "say_hello", ...}` (0.37 of its probability on the
    declared names where its name leaves them): text, not a get_weather call; a weather question is a call."""
    (hello, hello_calls), (paris, paris_calls) = await _answers(
        qwen_models_dir, 0.5, "Say hello in French.", "What's the weather in Paris?"
    )
    assert hello_calls == [] and '"say_hello"' in hello, hello
    assert paris_calls == ["get_weather"], paris


async def test_with_no_name_floor_the_grammar_picks_a_declared_name(qwen_models_dir: Path) -> None:
    """call_name_confidence 0: once the answer starts `{"name":`, the name is a declared one (Codex CLI's and Claude
    Code's made-up names then call a tool)."""
    ((text, calls),) = await _answers(qwen_models_dir, 0.0, "Say hello in French.")
    assert len(calls) == 1 and calls[0] in {tool.function.name for tool in TOOLS}, (text, calls)
