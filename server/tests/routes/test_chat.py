"""POST /v1/chat/completions: the non-streaming answer and the SSE stream of section 7."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypnos.config import LimitsConfig
from hypnos.openai import ChatCompletionRequest
from hypnos_server.routes.chat_input import chat_completion_request
from litestar.testing import TestClient
from server_kit import ScriptedPlugin, build_app, config, error_of, scripted_model, wait_ready

USER = [{"role": "user", "content": "tell me"}]


@pytest.fixture
def scripted():
    models = [
        scripted_model("thinker", reasoning=["hmm", " ok"], content=["Hel", "lo"], cached=4),
        scripted_model("plain", content=["Hi"]),
        scripted_model("caller", content=["Let me check."], tools=["get_weather", "get_time"], finish="tool_calls"),
        scripted_model("failing", content=["par"], fail=True),
        {"id": "long", "modality": "text_generation", "engine": "fake", "fake": {"tokens": 50}},
    ]
    app = build_app(config(models=models, limits={"max_tokens_cap": 20}), plugins=[ScriptedPlugin()])
    with TestClient(app) as client:
        wait_ready(client)
        yield client


def events(response):
    """The data payloads of an SSE body, [DONE] included."""
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = [line[len("data: ") :] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def test_non_stream_answer_shape(scripted):
    response = scripted.post("/v1/chat/completions", json={"model": "thinker", "messages": USER})
    assert response.status_code == 200
    body = response.json()
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert body["model"] == "thinker" and isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice == {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": "Hello",
            "refusal": None,
            "annotations": [],
            "reasoning_content": "hmm ok",
        },
        "finish_reason": "stop",
    }
    assert body["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 5,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    telemetry = body["hypnos_telemetry"]
    assert {"previous_tier", "placement", "tier_switch_latency_ms", "inference_latency_ms", "engine"} <= set(telemetry)


def test_reasoning_and_cached_details_omitted_when_absent(scripted):
    body = scripted.post("/v1/chat/completions", json={"model": "plain", "messages": USER}).json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hi", "refusal": None, "annotations": []}
    assert "prompt_tokens_details" not in body["usage"]


def test_tool_calls_in_the_message(scripted):
    body = scripted.post("/v1/chat/completions", json={"model": "caller", "messages": USER}).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather", "get_time"]
    assert choice["message"]["tool_calls"][0] == {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"a":1}'},
    }


def test_max_tokens_defaults_and_is_clamped(scripted):
    default = scripted.post("/v1/chat/completions", json={"model": "long", "messages": USER}).json()
    assert default["usage"]["completion_tokens"] == 20
    assert default["choices"][0]["finish_reason"] == "length"
    small = scripted.post("/v1/chat/completions", json={"model": "long", "messages": USER, "max_tokens": 3}).json()
    assert small["usage"]["completion_tokens"] == 3


def test_stream_chunk_order(scripted):
    response = scripted.post("/v1/chat/completions", json={"model": "thinker", "messages": USER, "stream": True})
    chunks = events(response)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1:3] == [{"reasoning_content": "hmm"}, {"reasoning_content": " ok"}]
    assert deltas[3:5] == [{"content": "Hel"}, {"content": "lo"}]
    final = chunks[-1]
    assert final["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert final["usage"]["total_tokens"] == 8 and final["usage"]["prompt_tokens_details"] == {"cached_tokens": 4}
    assert "hypnos_telemetry" in final
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_stream_tool_calls_one_chunk_each(scripted):
    chunks = events(scripted.post("/v1/chat/completions", json={"model": "caller", "messages": USER, "stream": True}))
    calls = [c["choices"][0]["delta"]["tool_calls"] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    assert [(call[0]["index"], call[0]["function"]["name"]) for call in calls] == [(0, "get_weather"), (1, "get_time")]
    assert calls[0][0] == {
        "index": 0,
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"a":1}'},
    }
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_stream_failure_after_headers_is_an_error_chunk(scripted):
    response = scripted.post("/v1/chat/completions", json={"model": "failing", "messages": USER, "stream": True})
    assert response.status_code == 200
    chunks = events(response)
    assert chunks[1]["choices"][0]["delta"] == {"content": "par"}
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "error"
    assert last["error"]["type"] == "server_error" and "`failing` failed" in last["error"]["message"]
    assert "decoder exploded" not in last["error"]["message"]  # the exception's text stays in the server log
    assert "usage" not in last


def test_stream_errors_before_headers_stay_http_errors(scripted):
    response = scripted.post("/v1/chat/completions", json={"model": "nope", "messages": USER, "stream": True})
    assert response.status_code == 404
    assert error_of(response)["type"] == "model_not_found"


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "role"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "x"}}}, "tool_choice"),
        ({"repetition_penalty": 0}, "`repetition_penalty`"),
        ({"repeat_penalty": -1.1}, "`repeat_penalty`"),
    ],
)
def test_invalid_requests_are_400(scripted, patch, needle):
    response = scripted.post("/v1/chat/completions", json={"model": "plain", "messages": USER, **patch})
    assert response.status_code == 400
    assert needle in error_of(response)["message"]


@pytest.mark.parametrize(
    ("patch", "penalty"),
    [({}, None), ({"repetition_penalty": 1.1}, 1.1), ({"repeat_penalty": 1.3}, 1.3), ({"repeat_penalty": 1.0}, 1.0)],
)
def test_the_repetition_penalty_reaches_the_engine_by_vllms_name_or_llama_cpps(patch, penalty):
    body = msgspec.convert({"model": "plain", "messages": USER, **patch}, ChatCompletionRequest)
    assert chat_completion_request(body, LimitsConfig()).chat.sampling.repeat_penalty == penalty


def test_prompt_above_max_prompt_chars_is_400():
    with TestClient(build_app(config(limits={"max_prompt_chars": 10}))) as client:
        wait_ready(client)
        response = client.post(
            "/v1/chat/completions", json={"model": "fake-chat", "messages": [{"role": "user", "content": "x" * 11}]}
        )
        assert response.status_code == 400
        assert "max_prompt_chars" in error_of(response)["message"]


def test_image_part_needs_a_vision_model(client):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "what?"}, image]}]
    assert client.post("/v1/chat/completions", json={"model": "fake-chat", "messages": messages}).status_code == 200
    response = client.post("/v1/chat/completions", json={"model": "fake-off", "messages": messages})
    assert response.status_code == 404


def test_remote_images_refused_when_not_allowed():
    with TestClient(build_app(config(limits={"allow_remote_image_urls": False}))) as client:
        wait_ready(client)
        image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
        response = client.post(
            "/v1/chat/completions", json={"model": "fake-chat", "messages": [{"role": "user", "content": [image]}]}
        )
        assert response.status_code == 400
        assert "allow_remote_image_urls" in error_of(response)["message"]


def test_estimated_wait_header_when_the_scheduler_estimates(client):
    body = {"model": "fake-chat", "messages": USER}
    cold = client.post("/v1/chat/completions", json=body)
    assert int(cold.headers["x-hypnos-estimated-wait-ms"]) > 0  # the model is not resident: a load is ahead
    warm = client.post("/v1/chat/completions", json=body)
    assert warm.headers["x-hypnos-estimated-wait-ms"] == "0"  # resident, idle, nothing queued


async def test_closing_the_connection_cancels_generation_and_releases_the_model():
    import asyncio

    from server_harness import RawResponse, call, running

    slow = {"id": "slow", "modality": "text_generation", "engine": "fake", "fake": {"token_ms": 50, "tokens": 200}}
    app = build_app(config(models=[slow]))
    records = []
    app.state.hypnos.observers.append(records.append)
    body = json.dumps({"model": "slow", "stream": True, "messages": USER}).encode()
    async with running(app):
        gone = asyncio.Event()
        response = RawResponse()
        task = asyncio.create_task(
            call(
                app,
                "POST",
                "/v1/chat/completions",
                body=body,
                headers={"content-type": "application/json"},
                disconnect=gone,
                response=response,
            )
        )
        await asyncio.wait_for(response.first_chunk_reached.wait(), 10)
        gone.set()
        await asyncio.wait_for(task, 10)
        state = app.state.hypnos.scheduler.get("slow")
        assert state.active_leases == 0
        assert b"[DONE]" not in response.body
    (record,) = records
    assert record.error is not None
