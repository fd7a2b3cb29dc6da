"""The Anthropic Python SDK's tool runner (`client.beta.messages.tool_runner`, which keeps its history as a message
thread by default) completes a two-step tool loop on the starter lineup: the tool runs and the answer uses it."""

from __future__ import annotations

from agents_kit import RequestLog, Served, assert_every_request_ok

WEATHER = "Oslo: 17 degrees Celsius, light rain."
QUESTION = "What is the weather in Oslo right now? Answer in one sentence."


def test_the_tool_runner_calls_its_tool_and_answers_from_it(served: Served, request_log: RequestLog) -> None:
    from anthropic import Anthropic, beta_tool

    cities: list[str] = []

    @beta_tool
    def get_weather(city: str) -> str:
        """The current weather in a city.

        Args:
            city: The city name.
        """
        cities.append(city)
        return WEATHER

    client = Anthropic(base_url=served.base, api_key="unused", max_retries=0, timeout=900)
    runner = client.beta.messages.tool_runner(
        model=served.model,
        max_tokens=512,
        tools=[get_weather],
        messages=[{"role": "user", "content": QUESTION}],
        max_iterations=4,
    )
    final = runner.until_done()
    answer = "".join(block.text for block in final.content if block.type == "text")
    assert_every_request_ok(request_log.records())
    assert cities, f"the tool never ran; the model answered {answer!r}"
    assert "17" in answer, f"the answer does not use the tool's result ({WEATHER!r}): {answer!r}"
