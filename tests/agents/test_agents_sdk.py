"""The OpenAI Agents SDK (`openai-agents`) completes a two-step tool loop on the starter lineup, through the Responses
model and the chat completions model: its function tool runs, and the final answer uses what the tool returned."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents_kit import RequestLog, Served, assert_every_request_ok

WEATHER = "Oslo: 17 degrees Celsius, light rain."
INSTRUCTIONS = (
    "You are a weather assistant. Look the weather up with the get_weather tool, then answer in one sentence."
)
QUESTION = "What is the weather in Oslo right now?"


async def tool_loop(served: Served, api: str) -> tuple[list[str], Any]:
    """One Runner.run of an Agent with a get_weather function tool, on `api` ("responses" or "chat"); the cities the
    tool was called with and the final output."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_default_openai_client,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # the traces would go to OpenAI's servers
    client = AsyncOpenAI(base_url=f"{served.base}/v1", api_key="unused", max_retries=0, timeout=900)
    set_default_openai_client(client, use_for_tracing=False)
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        cities.append(city)
        return WEATHER

    kind = OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel
    model = kind(model=served.model, openai_client=client)
    agent = Agent(name="weather", instructions=INSTRUCTIONS, tools=[get_weather], model=model)
    result = await Runner.run(agent, QUESTION, max_turns=4)
    return cities, result.final_output


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_an_agent_calls_its_tool_and_answers_from_it(served: Served, request_log: RequestLog, api: str) -> None:
    cities, answer = asyncio.run(tool_loop(served, api))
    assert_every_request_ok(request_log.records())
    assert cities, f"the tool never ran; the agent answered {answer!r}"
    assert "17" in str(answer), f"the answer does not use the tool's result ({WEATHER!r}): {answer!r}"
