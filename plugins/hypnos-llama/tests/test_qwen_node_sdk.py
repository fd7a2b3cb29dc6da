"""OpenAI parity of chat (issue 19) through the OpenAI Node SDK (npm `openai`, tests/node) against the real Qwen
starter: the requests of test_qwen_openai_parity.py, made and parsed by the SDK a JavaScript client uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypnos_server.testing import node_call, node_sdk, node_sdk_calls

from .qwen_openai import (
    LOGPROBS_ASK,
    MODEL,
    MODEL_KEYS,
    NAMED_CALL_ASK,
    PENALTIES,
    PENALTY_ASK,
    PROMPTS,
    STOP_ASK,
    TOO_LONG_ASK,
    TOOL_PROMPTS,
    UNDECLARED,
    UNDECLARED_CALL_ASK,
    UNENFORCEABLE_PART,
    USAGE_ASK,
    ask,
    json_object_ask,
    required_call_ask,
    strict_schema_ask,
    token_ids,
    unenforceable_ask,
    valid_call,
    valid_person,
)

pytestmark = pytest.mark.model
NODE_DIR = Path(__file__).resolve().parents[3] / "tests" / "node"


@pytest.fixture(scope="module")
def node_dir() -> Path:
    """tests/node with the pinned OpenAI Node SDK installed (fails without node and npm)."""
    return node_sdk(NODE_DIR)


def chat(node_dir: Path, server: str, *asks: dict[str, Any]) -> list[Any]:
    """What the Node SDK's chat.completions.create returns for each request (a stream: its chunks)."""
    results = node_sdk_calls(node_dir, server, [node_call("chat.completions.create", each) for each in asks])
    assert all("error" not in result for result in results), results
    return [result["value"] for result in results]


def streamed_text(chunks: list[dict[str, Any]], index: int = 0) -> str:
    """The content deltas of choice `index`, joined."""
    return "".join(c["delta"].get("content") or "" for chunk in chunks for c in chunk["choices"] if c["index"] == index)


def test_json_mode_and_a_strict_schema_give_valid_json_on_ten_prompts(node_dir: Path, qwen_server: str) -> None:
    asks = [json_object_ask(p) for p in PROMPTS] + [strict_schema_ask(p) for p in PROMPTS]
    *answers, chunks = chat(node_dir, qwen_server, *asks, {**strict_schema_ask("Invent a person."), "stream": True})
    for prompt, answer in zip(PROMPTS, answers[:10], strict=True):
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "stop", (prompt, choice)
        assert isinstance(json.loads(choice["message"]["content"]), dict), (prompt, choice)
    for prompt, answer in zip(PROMPTS, answers[10:], strict=True):
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "stop", (prompt, choice)
        assert valid_person(json.loads(choice["message"]["content"])), (prompt, choice)
    assert valid_person(json.loads(streamed_text(chunks))), chunks


def test_stop_strings_and_lists_are_not_sent_also_streamed(node_dir: Path, qwen_server: str) -> None:
    stops = [["7", "never"], ", 7"]
    full, *cuts = chat(
        node_dir,
        qwen_server,
        STOP_ASK,
        *({**STOP_ASK, "stop": s} for s in stops),
        *({**STOP_ASK, "stop": s, "stream": True} for s in stops),
    )
    text = full["choices"][0]["message"]["content"]
    assert "7" in text and "12" in text
    expected = [text[: text.index("7")].strip(), text[: text.index(", 7")].strip()]
    for answer, want in zip(cuts[:2], expected, strict=True):
        assert answer["choices"][0]["message"]["content"] == want
        assert answer["choices"][0]["finish_reason"] == "stop"
    for chunks, want in zip(cuts[2:], expected, strict=True):
        assert streamed_text(chunks) == want
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_n_choices_whole_and_streamed(node_dir: Path, qwen_server: str) -> None:
    colour = {"model": MODEL, "messages": ask("Name a colour."), "max_tokens": 16, "temperature": 1.0, "seed": 3}
    answer, chunks = chat(node_dir, qwen_server, {**colour, "n": 3}, {**colour, "n": 2, "stream": True})
    assert [choice["index"] for choice in answer["choices"]] == [0, 1, 2]
    assert all(choice["message"]["content"] for choice in answer["choices"])
    finished = {c["index"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"]}
    assert finished == {0, 1} and streamed_text(chunks, 0) and streamed_text(chunks, 1)


def test_logprobs_and_top_logprobs_whole_and_streamed(node_dir: Path, qwen_server: str) -> None:
    answer, chunks = chat(node_dir, qwen_server, LOGPROBS_ASK, {**LOGPROBS_ASK, "stream": True})
    choice = answer["choices"][0]
    entries = choice["logprobs"]["content"]
    assert entries and "".join(e["token"] for e in entries).strip() == choice["message"]["content"]
    for entry in entries:
        assert entry["logprob"] <= 0.0 and len(entry["top_logprobs"]) == 3
        assert entry["top_logprobs"][0]["token"] == entry["token"]
        assert bytes(entry["bytes"]).decode() == entry["token"]
    streamed = [
        e
        for c in chunks
        if c["choices"] and c["choices"][0].get("logprobs")
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    assert [e["token"] for e in streamed] == [e["token"] for e in entries]


def test_logit_bias_and_penalties(node_dir: Path, qwen_server: str, qwen_models_dir: Path) -> None:
    [banana] = token_ids(qwen_models_dir, " banana")
    capital = {"model": MODEL, "messages": ask("What is the capital of France?"), "temperature": 0, "max_tokens": 3}
    biased, plain, penalized = chat(
        node_dir, qwen_server, {**capital, "logit_bias": {str(banana): 100}}, PENALTY_ASK, {**PENALTY_ASK, **PENALTIES}
    )
    assert biased["choices"][0]["message"]["content"].split()[:2] == ["banana", "banana"]
    cats = [answer["choices"][0]["message"]["content"].lower().count("cat") for answer in (plain, penalized)]
    assert cats[1] < cats[0]


def test_tool_calls_required_named_and_undeclared(node_dir: Path, qwen_server: str) -> None:
    undeclared = [UNDECLARED_CALL_ASK, {**UNDECLARED_CALL_ASK, "stream": True}]
    *required, named, whole, chunks = chat(
        node_dir, qwen_server, *(required_call_ask(p) for p in TOOL_PROMPTS), NAMED_CALL_ASK, *undeclared
    )
    for prompt, answer in zip(TOOL_PROMPTS, required, strict=True):
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "tool_calls", (prompt, choice)
        (call,) = choice["message"]["tool_calls"]
        assert valid_call(call["function"]["name"], json.loads(call["function"]["arguments"])), (prompt, call)
    (call,) = named["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_time" and valid_call("get_time", json.loads(call["function"]["arguments"]))
    # Build 3: a call's name is one of the declared functions; the undeclared one never comes out as a call
    message = whole["choices"][0]["message"]
    called = {call["function"]["name"] for call in message.get("tool_calls") or []}
    assert UNDECLARED not in called and called <= {"get_weather"}
    assert "<tool_call>" not in (message["content"] or "")
    deltas = [c["delta"] for chunk in chunks for c in chunk["choices"]]
    streamed = {call["function"]["name"] for delta in deltas for call in delta.get("tool_calls") or []}
    assert streamed <= {"get_weather"} and "<tool_call>" not in streamed_text(chunks)


def test_errors_before_the_first_token_are_4xx_with_stream_true(node_dir: Path, qwen_server: str) -> None:
    calls = [node_call("chat.completions.create", ask) for ask in (TOO_LONG_ASK, unenforceable_ask(True))]
    too_long, schema = (result["error"] for result in node_sdk_calls(node_dir, qwen_server, calls))
    for error in (too_long, schema):
        assert error["api_error"] and error["name"] == "BadRequestError" and error["status"] == 400
        assert error["chunks"] == []
    assert too_long["code"] == "context_length_exceeded"
    assert UNENFORCEABLE_PART in schema["message"]


def test_include_usage_sends_the_usage_chunk(node_dir: Path, qwen_server: str) -> None:
    [chunks] = chat(node_dir, qwen_server, USAGE_ASK)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] in {"stop", "length"}


def test_models_retrieve_and_model_not_found(node_dir: Path, qwen_server: str) -> None:
    calls = [node_call("models.retrieve", MODEL), node_call("models.list"), node_call("models.retrieve", "ghost")]
    model, listed, missing = node_sdk_calls(node_dir, qwen_server, calls)
    entry = next(m for m in listed["value"]["data"] if m["id"] == MODEL)
    assert {key: model["value"][key] for key in MODEL_KEYS} == {key: entry[key] for key in MODEL_KEYS}
    assert model["value"]["object"] == "model"
    error = missing["error"]
    assert error["name"] == "NotFoundError" and error["status"] == 404 and error["type"] == "model_not_found"
