"""OpenAI parity of chat (issue 19) with the real Qwen2.5-Coder-0.5B GGUF through the real server and the OpenAI SDK:
response_format, stop, n, logprobs, logit_bias, penalties, errors before the first token, include_usage, tool calls,
models.retrieve. test_qwen_node_sdk.py sends the same requests through the OpenAI Node SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
    UNENFORCEABLE,
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


@pytest.fixture(scope="module")
def server(qwen_server: str) -> str:
    """The shared Qwen server (conftest)."""
    return qwen_server


@pytest.fixture
def client(server: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)


def test_json_object_mode_gives_parseable_json_on_ten_prompts(client: Any) -> None:
    for prompt in PROMPTS:
        choice = client.chat.completions.create(**json_object_ask(prompt)).choices[0]
        assert choice.finish_reason == "stop", (prompt, choice.message.content)
        assert isinstance(json.loads(choice.message.content), dict), prompt


def test_a_strict_schema_gives_valid_json_on_ten_prompts(client: Any) -> None:
    for prompt in PROMPTS:
        choice = client.chat.completions.create(**strict_schema_ask(prompt)).choices[0]
        assert choice.finish_reason == "stop", (prompt, choice.message.content)
        assert valid_person(json.loads(choice.message.content)), (prompt, choice.message.content)


def test_a_strict_schema_streams_valid_json(client: Any) -> None:
    chunks = list(client.chat.completions.create(**strict_schema_ask("Invent a person."), stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert valid_person(json.loads(text)), text


def test_a_schema_part_the_grammar_cannot_enforce_is_a_400_naming_it(client: Any) -> None:
    import openai

    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(**unenforceable_ask(stream))
        assert UNENFORCEABLE_PART in str(raised.value)
    # without strict the keyword is a hint: the rest of the schema is still enforced
    answer = client.chat.completions.create(
        model=MODEL,
        messages=ask("How old is the Eiffel tower?"),
        max_tokens=40,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": UNENFORCEABLE}},
    )
    assert isinstance(json.loads(answer.choices[0].message.content)["age"], int)


def test_stop_strings_end_the_answer_and_are_not_sent(client: Any) -> None:
    full = client.chat.completions.create(**STOP_ASK).choices[0].message.content
    assert "7" in full and "12" in full
    cut = client.chat.completions.create(**STOP_ASK, stop=["7", "never"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == full[: full.index("7")].strip()
    chunks = list(client.chat.completions.create(**STOP_ASK, stop=", 7", stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == full[: full.index(", 7")].strip()
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_n_choices_decode_together(client: Any) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=ask("Name a colour."), n=3, temperature=1.0, max_tokens=16, seed=3
    )
    assert [choice.index for choice in answer.choices] == [0, 1, 2]
    assert all(choice.message.content for choice in answer.choices)
    assert answer.model_extra["hypnos_telemetry"]["engine"]["concurrent_slots"] >= 2
    single = client.chat.completions.create(
        model=MODEL, messages=ask("Name a colour."), temperature=1.0, max_tokens=16, seed=3
    )
    assert answer.usage.prompt_tokens == single.usage.prompt_tokens
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=ask("Name a colour."), n=2, max_tokens=16, stream=True)
    )
    texts = {0: "", 1: ""}
    finished = set()
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finished.add(choice.index)
    assert finished == {0, 1} and texts[0] and texts[1]


def test_logprobs_in_the_openai_shape_whole_and_streamed(client: Any) -> None:
    choice = client.chat.completions.create(**LOGPROBS_ASK).choices[0]
    entries = choice.logprobs.content
    assert entries and "".join(entry.token for entry in entries).strip() == choice.message.content
    for entry in entries:
        assert entry.logprob <= 0.0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token  # greedy: the likeliest token was chosen
        assert bytes(entry.bytes).decode() == entry.token
    chunks = list(client.chat.completions.create(**LOGPROBS_ASK, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in entries]
    plain = client.chat.completions.create(**{**LOGPROBS_ASK, "logprobs": False, "top_logprobs": None}).choices[0]
    assert plain.logprobs is None


def test_logit_bias_steers_the_tokens(client: Any, qwen_models_dir: Path) -> None:
    [banana] = token_ids(qwen_models_dir, " banana")
    answer = client.chat.completions.create(
        model=MODEL,
        messages=ask("What is the capital of France?"),
        temperature=0,
        max_tokens=3,
        logit_bias={str(banana): 100},
    )
    assert answer.choices[0].message.content.split()[:2] == ["banana", "banana"]


def test_frequency_and_presence_penalties_reduce_repetition(client: Any) -> None:
    plain = client.chat.completions.create(**PENALTY_ASK).choices[0].message.content.lower().count("cat")
    penalized = client.chat.completions.create(**PENALTY_ASK, **PENALTIES)
    assert penalized.choices[0].message.content.lower().count("cat") < plain


def test_a_repetition_penalty_by_vllms_name_reduces_repetition(client: Any) -> None:
    """`repetition_penalty` (vLLM's extra field, sent as the OpenAI SDK sends extras) weighs the prompt's "cat" and
    the answer's: the 0.5B writes the word fewer times."""
    plain = client.chat.completions.create(**PENALTY_ASK).choices[0].message.content.lower().count("cat")
    penalized = client.chat.completions.create(**PENALTY_ASK, extra_body={"repetition_penalty": 1.5})
    assert penalized.choices[0].message.content.lower().count("cat") < plain


def test_a_too_long_prompt_is_a_400_with_its_code_even_when_streaming(client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(**TOO_LONG_ASK)
    assert raised.value.code == "context_length_exceeded"
    # the words LangChain (Anthropic's) and litellm (OpenAI's) read as a context overflow
    assert "prompt is too long: " in raised.value.message and "maximum context length is" in raised.value.message


def test_include_usage_adds_the_openai_usage_chunk(client: Any) -> None:
    chunks = list(client.chat.completions.create(**USAGE_ASK))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert chunks[-2].choices[0].finish_reason in {"stop", "length"}
    # once: a client that adds up the chunks' usage (LangChain) counts the answer once
    assert [chunk.usage for chunk in chunks[:-1] if chunk.usage is not None] == []


def test_a_required_call_always_parses_and_its_arguments_follow_the_schema(client: Any) -> None:
    for prompt in TOOL_PROMPTS:
        choice = client.chat.completions.create(**required_call_ask(prompt)).choices[0]
        assert choice.finish_reason == "tool_calls", (prompt, choice.message.content)
        (call,) = choice.message.tool_calls
        assert valid_call(call.function.name, json.loads(call.function.arguments)), (prompt, call)
        assert "<tool_call>" not in (choice.message.content or "")


def test_a_named_function_gives_that_call_with_valid_arguments(client: Any) -> None:
    choice = client.chat.completions.create(**NAMED_CALL_ASK).choices[0]
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_time" and valid_call("get_time", json.loads(call.function.arguments))


def test_a_call_to_an_undeclared_function_never_comes_out(client: Any) -> None:
    """Build 3: once the model opens a call, its name is one of the declared functions (the grammar): asked to call
    a function it was shown but not given, it calls none of that name, whole or streamed."""
    for stream in (False, True):
        answer = client.chat.completions.create(**UNDECLARED_CALL_ASK, stream=stream)
        if stream:
            chunks = list(answer)
            calls = [call.function.name for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            message = answer.choices[0].message
            calls = [call.function.name for call in message.tool_calls or []]
            content = message.content or ""
        assert UNDECLARED not in calls and set(calls) <= {"get_weather"}, calls
        assert "<tool_call>" not in content, content


def test_models_retrieve_answers_the_model_object_or_model_not_found(client: Any) -> None:
    import openai

    model = client.models.retrieve(MODEL).model_dump()
    listed = next(m for m in client.models.list().data if m.id == MODEL).model_dump()
    assert {key: model[key] for key in MODEL_KEYS} == {key: listed[key] for key in MODEL_KEYS}
    assert model["object"] == "model" and model["modality"] == "text_generation"
    with pytest.raises(openai.NotFoundError) as raised:
        client.models.retrieve("no-such-model")
    assert raised.value.status_code == 404 and raised.value.type == "model_not_found"
