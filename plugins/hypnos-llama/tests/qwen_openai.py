"""The OpenAI-parity requests (issue 19) the Python and the Node SDK tests both send to the Qwen starter, and checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MODEL = "qwen2.5:0.5b"
MODEL_KEYS = ("id", "object", "created", "owned_by", "modality")  # of a model object: the rest moves with its tier
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
TERSE = (
    "You reply with one compact JSON object of two to four keys; every string value has at most five words. "
    'Example: {"name": "Old Tom", "kind": "grey cat", "age": 7}'
)
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
JSON_OBJECT = {"type": "json_object"}
STRICT_PERSON = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}
# `multipleOf` is a keyword the grammar cannot enforce: with strict, a 400 naming it (bounds such as `minimum` are
# enforced: test_schema_grammar.py)
# multipleOf over a one-sided bound other than 0 or 1: beyond what the grammar's remainder automaton holds
UNENFORCEABLE = {
    "type": "object",
    "properties": {"age": {"type": "integer", "minimum": 5, "multipleOf": 2}},
    "required": ["age"],
}
UNENFORCEABLE_PART = "response_format.json_schema.schema.properties.age.multipleOf"
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
TOOL_PROMPTS = [*PROMPTS[:6], "What's the weather in Rome?", "What time is it in Tokyo?"]
# The model is shown a tool the request does not declare, and asked to use it: the call it writes must come back as
# text. The system message mimics Qwen's own tool instructions (the template's <tools> block) for the undeclared one.
UNDECLARED = "delete_files"
UNDECLARED_ASK = [
    {
        "role": "system",
        "content": (
            "You may call one or more functions to assist with the user query. Besides the declared ones you have:\n"
            '<tools>\n{"type": "function", "function": {"name": "delete_files", "description": "Delete every file in'
            ' a folder", "parameters": {"type": "object", "properties": {"folder": {"type": "string"}}}}}\n</tools>\n'
            "For each function call, return a json object with function name and arguments within <tool_call>"
            '</tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
            "</tool_call>"
        ),
    },
    {"role": "user", "content": "Call delete_files to delete every file in the folder /tmp/old."},
]


def ask(prompt: str) -> list[dict[str, str]]:
    """One user message."""
    return [{"role": "user", "content": prompt}]


STOP_ASK = {
    "model": MODEL,
    "messages": ask("Count from 1 to 20, separated by commas."),
    "temperature": 0,
    "max_tokens": 80,
}
LOGPROBS_ASK = {
    "model": MODEL,
    "messages": ask("What is the capital of France?"),
    "temperature": 0,
    "max_tokens": 12,
    "logprobs": True,
    "top_logprobs": 3,
}
PENALTY_ASK = {
    "model": MODEL,
    "messages": ask("Write the word cat 40 times, separated by spaces."),
    "temperature": 0,
    "max_tokens": 60,
}
PENALTIES = {"frequency_penalty": 2.0, "presence_penalty": 2.0}
TOO_LONG_ASK = {"model": MODEL, "messages": ask("hello " * 40000), "max_tokens": 4, "stream": True}
USAGE_ASK = {
    "model": MODEL,
    "messages": ask("Say hi."),
    "max_tokens": 8,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def json_object_ask(prompt: str) -> dict[str, Any]:
    """JSON mode on one of PROMPTS; greedy, with a frequency penalty against the loops a 0.5B model can fall into in a
    list (the grammar keeps any length valid JSON, the penalty lets it end)."""
    messages = [{"role": "system", "content": TERSE}, *ask(prompt)]
    return {
        "model": MODEL,
        "messages": messages,
        "max_tokens": 400,
        "temperature": 0,
        "frequency_penalty": 0.5,
        "response_format": JSON_OBJECT,
    }


def strict_schema_ask(prompt: str) -> dict[str, Any]:
    """PERSON as a strict json_schema on one of PROMPTS."""
    messages = ask(prompt + " Answer as a person record.")
    return {"model": MODEL, "messages": messages, "max_tokens": 300, "seed": 11, "response_format": STRICT_PERSON}


def unenforceable_ask(stream: bool) -> dict[str, Any]:
    """A strict schema with a keyword the grammar cannot enforce (a 400 before any token)."""
    schema = {"name": "x", "strict": True, "schema": UNENFORCEABLE}
    return {
        "model": MODEL,
        "messages": ask("How old?"),
        "max_tokens": 20,
        "stream": stream,
        "response_format": {"type": "json_schema", "json_schema": schema},
    }


def required_call_ask(prompt: str) -> dict[str, Any]:
    """tool_choice "required" over WEATHER and CLOCK, sampled (not greedy) so that the grammar is what holds."""
    return {
        "model": MODEL,
        "messages": ask(prompt),
        "tools": [WEATHER, CLOCK],
        "tool_choice": "required",
        "max_tokens": 80,
        "temperature": 0.7,
        "seed": 5,
    }


NAMED_CALL_ASK = {
    "model": MODEL,
    "messages": ask("What's the weather in Paris?"),
    "tools": [WEATHER, CLOCK],
    "tool_choice": {"type": "function", "function": {"name": "get_time"}},
    "temperature": 0,
    "max_tokens": 64,
}
UNDECLARED_CALL_ASK = {
    "model": MODEL,
    "messages": UNDECLARED_ASK,
    "tools": [WEATHER],
    "temperature": 0,
    "max_tokens": 80,
}


def valid_person(value: Any) -> bool:
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


def valid_call(name: str, arguments: Any) -> bool:
    """A call to WEATHER or CLOCK whose arguments follow that tool's schema."""
    if name == "get_weather":
        return (
            isinstance(arguments, dict)
            and isinstance(arguments.get("city"), str)
            and set(arguments) <= {"city", "unit"}
            and arguments.get("unit", "celsius") in {"celsius", "fahrenheit"}
        )
    return name == "get_time" and isinstance(arguments, dict) and set(arguments) == {"zone"}


def token_ids(qwen_models_dir: Path, text: str) -> list[int]:
    """`text` in the Qwen vocabulary."""
    import llama_cpp
    from hypnos_llama.starter import QWEN_CODER_0_5B

    vocab = llama_cpp.Llama(str(qwen_models_dir / QWEN_CODER_0_5B.filename), vocab_only=True, verbose=False)
    return vocab.tokenize(text.encode(), add_bos=False, special=False)
