"""OpenAI parity of chat (issue 19) with the real Qwen2.5-Coder-0.5B GGUF through the real server and the OpenAI SDK:
response_format, stop, n, logprobs, logit_bias, penalties, errors before the first token, include_usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.model
MODEL = "qwen2.5:0.5b"
PROMPTS = [
    "Describe a cat.",
    "Tell me about Paris.",
    "Give me a fictional person who likes chess.",
    "Describe your favourite book.",
    "Invent a character for a fantasy novel.",
    "Describe the weather in Oslo in winter.",
    "Tell me about a famous scientist.",
    "Describe a red bicycle.",
    "Give details about a made-up football player.",
    "Describe a small village by the sea.",
]
TERSE = "You reply with one compact JSON object of two to four keys; every string value has at most five words."
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer"},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 3},
        "mood": {"type": "string", "enum": ["happy", "sad", "calm"]},
    },
    "required": ["name", "age", "hobbies", "mood"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server(qwen_server: str) -> str:
    """The shared Qwen server (conftest)."""
    return qwen_server


@pytest.fixture
def client(server: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)


def _ask(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


def _valid_person(value: Any) -> bool:
    """PERSON checked by hand (no jsonschema in the test venv)."""
    return (
        isinstance(value, dict)
        and set(value) == {"name", "age", "hobbies", "mood"}
        and isinstance(value["name"], str)
        and len(value["name"]) <= 40
        and isinstance(value["age"], int)
        and not isinstance(value["age"], bool)
        and isinstance(value["hobbies"], list)
        and len(value["hobbies"]) <= 3
        and all(isinstance(h, str) and len(h) <= 30 for h in value["hobbies"])
        and value["mood"] in {"happy", "sad", "calm"}
    )


def test_json_object_mode_gives_parseable_json_on_ten_prompts(client: Any) -> None:
    for prompt in PROMPTS:
        answer = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": TERSE}, *_ask(prompt)],
            max_tokens=400,
            temperature=0,
            response_format={"type": "json_object"},
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "stop", (prompt, choice.message.content)
        assert isinstance(json.loads(choice.message.content), dict), prompt


def test_a_strict_schema_gives_valid_json_on_ten_prompts(client: Any) -> None:
    schema = {"name": "person", "strict": True, "schema": PERSON}
    for prompt in PROMPTS:
        answer = client.chat.completions.create(
            model=MODEL,
            messages=_ask(prompt + " Answer as a person record."),
            max_tokens=300,
            seed=11,
            response_format={"type": "json_schema", "json_schema": schema},
        )
        content = answer.choices[0].message.content
        assert answer.choices[0].finish_reason == "stop", (prompt, content)
        assert _valid_person(json.loads(content)), (prompt, content)


def test_a_strict_schema_streams_valid_json(client: Any) -> None:
    schema = {"name": "person", "strict": True, "schema": PERSON}
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=_ask("Invent a person."),
            max_tokens=300,
            stream=True,
            response_format={"type": "json_schema", "json_schema": schema},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert _valid_person(json.loads(text)), text


def test_a_schema_part_the_grammar_cannot_enforce_is_a_400_naming_it(client: Any) -> None:
    import openai

    schema = {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}, "required": ["age"]}
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(
                model=MODEL,
                messages=_ask("How old?"),
                max_tokens=20,
                stream=stream,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}},
            )
        assert "response_format.json_schema.schema.properties.age.minimum" in str(raised.value)
    # without strict the keyword is a hint: the rest of the schema is still enforced
    answer = client.chat.completions.create(
        model=MODEL,
        messages=_ask("How old is the Eiffel tower?"),
        max_tokens=40,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    assert isinstance(json.loads(answer.choices[0].message.content)["age"], int)


def test_stop_strings_end_the_answer_and_are_not_sent(client: Any) -> None:
    ask = {
        "model": MODEL,
        "messages": _ask("Count from 1 to 20, separated by commas."),
        "temperature": 0,
        "max_tokens": 80,
    }
    full = client.chat.completions.create(**ask).choices[0].message.content
    assert "7" in full and "12" in full
    cut = client.chat.completions.create(**ask, stop=["7", "never"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == full[: full.index("7")].strip()
    chunks = list(client.chat.completions.create(**ask, stop=", 7", stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == full[: full.index(", 7")].strip()
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_n_choices_decode_together(client: Any) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=_ask("Name a colour."), n=3, temperature=1.0, max_tokens=16, seed=3
    )
    assert [choice.index for choice in answer.choices] == [0, 1, 2]
    assert all(choice.message.content for choice in answer.choices)
    assert answer.model_extra["hypnos_telemetry"]["engine"]["concurrent_slots"] >= 2
    single = client.chat.completions.create(
        model=MODEL, messages=_ask("Name a colour."), temperature=1.0, max_tokens=16, seed=3
    )
    assert answer.usage.prompt_tokens == single.usage.prompt_tokens
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=_ask("Name a colour."), n=2, max_tokens=16, stream=True)
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
    ask = {
        "model": MODEL,
        "messages": _ask("What is the capital of France?"),
        "temperature": 0,
        "max_tokens": 12,
        "logprobs": True,
        "top_logprobs": 3,
    }
    choice = client.chat.completions.create(**ask).choices[0]
    entries = choice.logprobs.content
    assert entries and "".join(entry.token for entry in entries).strip() == choice.message.content
    for entry in entries:
        assert entry.logprob <= 0.0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token  # greedy: the likeliest token was chosen
        assert bytes(entry.bytes).decode() == entry.token
    chunks = list(client.chat.completions.create(**ask, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in entries]
    plain = client.chat.completions.create(**{**ask, "logprobs": False, "top_logprobs": None}).choices[0]
    assert plain.logprobs is None


def _token_ids(qwen_models_dir: Path, text: str) -> list[int]:
    import llama_cpp
    from hypnos_llama.starter import QWEN_CODER_0_5B

    vocab = llama_cpp.Llama(str(qwen_models_dir / QWEN_CODER_0_5B.filename), vocab_only=True, verbose=False)
    return vocab.tokenize(text.encode(), add_bos=False, special=False)


def test_logit_bias_steers_the_tokens(client: Any, qwen_models_dir: Path) -> None:
    [banana] = _token_ids(qwen_models_dir, " banana")
    answer = client.chat.completions.create(
        model=MODEL,
        messages=_ask("What is the capital of France?"),
        temperature=0,
        max_tokens=3,
        logit_bias={str(banana): 100},
    )
    assert answer.choices[0].message.content.split()[:2] == ["banana", "banana"]


def test_frequency_and_presence_penalties_reduce_repetition(client: Any) -> None:
    ask = {
        "model": MODEL,
        "messages": _ask("Write the word cat 40 times, separated by spaces."),
        "temperature": 0,
        "max_tokens": 60,
    }
    plain = client.chat.completions.create(**ask).choices[0].message.content.lower().count("cat")
    penalized = client.chat.completions.create(**ask, frequency_penalty=2.0, presence_penalty=2.0)
    assert penalized.choices[0].message.content.lower().count("cat") < plain


def test_a_too_long_prompt_is_a_400_with_its_code_even_when_streaming(client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=_ask("hello " * 40000), max_tokens=4, stream=True)
    assert raised.value.code == "context_length_exceeded"


def test_include_usage_adds_the_openai_usage_chunk(client: Any) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=_ask("Say hi."), max_tokens=8, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert chunks[-2].choices[0].finish_reason in {"stop", "length"}


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
}


def test_a_required_call_always_parses_and_its_arguments_follow_the_schema(client: Any) -> None:
    for prompt in [*PROMPTS[:6], "What's the weather in Rome?", "What time is it in Tokyo?"]:
        answer = client.chat.completions.create(
            model=MODEL,
            messages=_ask(prompt),
            tools=[WEATHER, CLOCK],
            tool_choice="required",
            max_tokens=80,
            temperature=0.7,
            seed=5,
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls", (prompt, choice.message.content)
        (call,) = choice.message.tool_calls
        arguments = json.loads(call.function.arguments)
        if call.function.name == "get_weather":
            assert isinstance(arguments["city"], str) and set(arguments) <= {"city", "unit"}
            assert arguments.get("unit", "celsius") in {"celsius", "fahrenheit"}
        else:
            assert call.function.name == "get_time" and set(arguments) == {"zone"}
        assert "<tool_call>" not in (choice.message.content or "")
