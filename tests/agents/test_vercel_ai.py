"""The Vercel AI SDK (`ai` generateText with tools and stopWhen: stepCountIs) completes a two-step tool loop on the
starter lineup, through openai(model) (Responses), openai.chat(model) and the Open Responses provider
(@ai-sdk/open-responses, which speaks only what the Open Responses spec defines): the tool runs and the answer uses
it."""

from __future__ import annotations

import json
import subprocess

import pytest
from agents_kit import HERE, RequestLog, Served, assert_every_request_ok

WEATHER = "Oslo: 17 degrees Celsius, light rain."
QUESTION = "What is the weather in Oslo right now? Answer in one sentence."


@pytest.mark.parametrize("api", ["responses", "chat", "open-responses"])
def test_generate_text_calls_its_tool_and_answers_from_it(
    served: Served, request_log: RequestLog, node_env: dict[str, str], api: str
) -> None:
    payload = {
        "baseURL": f"{served.base}/v1",
        "apiKey": "unused",
        "model": served.model,
        "api": api,
        "prompt": QUESTION,
        "steps": 4,
        "answer": WEATHER,
    }
    run = subprocess.run(
        ["node", "vercel.mjs"],
        cwd=HERE,
        env=node_env,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert_every_request_ok(request_log.records())
    assert "error" not in result, result
    assert result["calls"], f"the tool never ran: {result['steps']}"
    assert "17" in result["text"], f"the answer does not use the tool's result ({WEATHER!r}): {result['steps']}"
