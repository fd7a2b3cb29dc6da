"""The real Qwen2.5-Coder-0.5B GGUF through the real server (granian) and the OpenAI SDK."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.model
MODEL = "qwen2.5:0.5b"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server(qwen_server: str) -> str:
    """The shared Qwen server (conftest)."""
    return qwen_server


@pytest.fixture
def client(server: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)


def _model_status(server: str) -> dict[str, Any]:
    body = httpx.get(f"{server}/v1/memory/status", timeout=10).json()
    return next(m for m in body["models"] if m["id"] == MODEL)


def test_capital_of_france_non_streaming(client: Any) -> None:
    answer = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=32)
    assert "Paris" in answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.prompt_tokens > 10 and answer.usage.completion_tokens > 0
    telemetry = answer.model_extra["hypnos_telemetry"]
    assert telemetry["engine"]["decode_tokens_per_s"] > 0


def test_capital_of_france_streaming(client: Any) -> None:
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=32, stream=True)
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    final = chunks[-1]
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None and final.usage.completion_tokens > 0
    assert "hypnos_telemetry" in final.model_extra


def test_same_seed_same_answer(client: Any) -> None:
    ask = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "temperature": 0.9,
        "seed": 42,
        "max_tokens": 12,
    }
    first = client.chat.completions.create(**ask).choices[0].message.content
    again = client.chat.completions.create(**ask).choices[0].message.content
    assert first == again


def test_cancelling_a_stream_frees_the_slot(client: Any, server: str) -> None:
    ask = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
    stream = client.chat.completions.create(model=MODEL, messages=ask, max_tokens=400, stream=True)
    seen = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            seen += 1
        if seen >= 3:
            break
    stream.close()
    deadline = time.monotonic() + 15
    while _model_status(server)["active_leases"] != 0:
        assert time.monotonic() < deadline, "the lease was not released after the client went away"
        time.sleep(0.1)
    again = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=16)
    assert "Paris" in again.choices[0].message.content


def test_append_only_second_turn_reports_cached_tokens(client: Any) -> None:
    first = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=24)
    history = [
        *QUESTION,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And of Italy?"},
    ]
    second = client.chat.completions.create(model=MODEL, messages=history, temperature=0, max_tokens=24)
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    assert second.model_extra["hypnos_telemetry"]["engine"]["cached_tokens"] > 0


def test_tier2_and_back_mid_conversation(client: Any, server: str) -> None:
    first = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=24)
    moved = httpx.post(f"{server}/v1/memory/tier", json={"model": MODEL, "target_tier": "tier2_pinned_ram"}, timeout=60)
    assert moved.status_code == 200, moved.text
    history = [
        *QUESTION,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Answer again in one word."},
    ]
    second = client.chat.completions.create(model=MODEL, messages=history, temperature=0, max_tokens=8)
    telemetry = second.model_extra["hypnos_telemetry"]
    assert telemetry["previous_tier"] == "tier2_pinned_ram"
    assert telemetry["tier_switch_latency_ms"] > 0
    assert telemetry["tier_switch_phases"]["load_mode"] == "mmap"
    assert "Paris" in second.choices[0].message.content


def test_three_streams_share_decode_steps_and_match_alone(client: Any) -> None:
    import concurrent.futures

    prompts = ["Count from one to five.", "Name three fruits.", "What is two plus two?"]

    def ask(prompt: str) -> tuple[str, int]:
        answer = client.chat.completions.create(
            # long enough that the three answers still overlap when one joins late: with 12 tokens, a CI run on
            # the loaded 2-core box saw at most 2 slots in a step (its prefill may wait for the prefill share)
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            temperature=0,
            max_tokens=40,
        )
        return answer.choices[0].message.content, answer.model_extra["hypnos_telemetry"]["engine"]["concurrent_slots"]

    alone = [ask(p)[0] for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        together = list(pool.map(ask, prompts))
    assert [t[0] for t in together] == alone
    assert max(t[1] for t in together) == 3


def test_kv_parking_brings_a_conversation_back_after_a_tier_move(client: Any, server: str) -> None:
    def kv_park(body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{server}/v1/memory/kv-park"
        response = httpx.post(url, json=body, timeout=10) if body else httpx.get(url, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def to_tier2() -> None:
        moved = httpx.post(
            f"{server}/v1/memory/tier", json={"model": MODEL, "target_tier": "tier2_pinned_ram"}, timeout=60
        )
        assert moved.status_code == 200, moved.text

    story = [{"role": "user", "content": "Tell me two facts about the Eiffel Tower."}]
    first = client.chat.completions.create(model=MODEL, messages=story, temperature=0, max_tokens=40)
    history = [
        *story,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "How tall is it?"},
    ]
    to_tier2()  # parking is off: the next turn prefills the whole history
    plain = client.chat.completions.create(model=MODEL, messages=history, temperature=0, max_tokens=24)
    details = plain.usage.prompt_tokens_details  # left out when nothing was cached
    assert details is None or details.cached_tokens == 0
    try:
        assert kv_park({"enabled": True})["enabled"] is True
        to_tier2()
        (parked,) = [m for m in kv_park()["models"] if m["model"] == MODEL]
        assert parked["tokens"] >= plain.usage.prompt_tokens and parked["bytes"] > 0 and parked["slots"] >= 1
        again = client.chat.completions.create(model=MODEL, messages=history, temperature=0, max_tokens=24)
        # restored on this turn from the prompt cache, where it was parked
        assert again.usage.prompt_tokens_details.cached_tokens >= plain.usage.prompt_tokens - 1
        assert again.choices[0].message.content == plain.choices[0].message.content  # parking never changes it
        assert kv_park()["models"] == []  # taken back by the model
    finally:
        kv_park({"enabled": False})
