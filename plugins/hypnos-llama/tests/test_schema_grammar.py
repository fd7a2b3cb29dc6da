"""Schema bounds in the grammar (issue 40, Build 2; issue 45, H1): integer and number ranges, string lengths and
item counts enforced, long bounds as bounded repetitions llama.cpp parses, bounds past the cap a 400 naming them."""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypnos.errors import HypnosError
from hypnos_llama.grammar import WHERE, schema_grammar
from hypnos_llama.schema_gbnf import integer_range, number_range
from hypnos_llama.testing import sample_text


def _regex(gbnf: str) -> re.Pattern[str]:
    """A GBNF expression of literals, classes, groups and quantifiers (no rule names) as a Python regex."""
    out, index = [], 0
    while index < len(gbnf):
        char = gbnf[index]
        if char == '"':
            end = gbnf.index('"', index + 1)
            out.append(re.escape(gbnf[index + 1 : end]))
            index = end + 1
        elif char == "[":
            end = gbnf.index("]", index + 1)
            out.append(gbnf[index : end + 1])
            index = end + 1
        else:
            out.append("(?:" if char == "(" else "" if char == " " else char)
            index += 1
    return re.compile("".join(out))


@pytest.mark.parametrize(
    ("low", "high"),
    [
        (0, 9),
        (1, 10),
        (-5, 5),
        (-100, -3),
        (7, 1000),
        (0, None),
        (5, None),
        (-17, None),
        (None, 42),
        (None, -8),
        (123, 987),
        (0, 0),
        (99, 100),
    ],
)
def test_an_integer_range_allows_exactly_the_integers_within_it(low: int | None, high: int | None) -> None:
    pattern = _regex(integer_range(low, high))
    for value in range(-1200, 1200):
        inside = (low is None or value >= low) and (high is None or value <= high)
        assert bool(pattern.fullmatch(str(value))) == inside, value
    assert not pattern.fullmatch("-0") and not pattern.fullmatch("01")


@pytest.mark.parametrize(
    "schema",
    [
        {"minimum": 0, "maximum": 1},
        {"minimum": 0.5, "maximum": 0.9},
        {"exclusiveMinimum": 0},
        {"minimum": -2.25, "exclusiveMaximum": 3.5},
        {"maximum": -0.5},
        {"exclusiveMaximum": 0},
        {"minimum": 1.05, "maximum": 1.5},
        {"exclusiveMinimum": 0.1, "exclusiveMaximum": 0.2},
        {"minimum": 12.5},
    ],
)
def test_a_number_range_allows_exactly_the_decimals_within_it(schema: dict[str, Any]) -> None:
    pattern = _regex(number_range(schema) or "[^\\x00-\\x7f]")
    chance = random.Random(7)
    checks = {
        "minimum": lambda v, b: v >= b,
        "exclusiveMinimum": lambda v, b: v > b,
        "maximum": lambda v, b: v <= b,
        "exclusiveMaximum": lambda v, b: v < b,
    }
    for _ in range(4000):
        value = Decimal(chance.randint(-3000, 3000)) / chance.choice([1, 10, 100, 1000])
        text = format(value, "f")
        inside = all(check(value, Decimal(str(schema[key]))) for key, check in checks.items() if key in schema)
        if value != 0 or not text.startswith("-"):
            assert bool(pattern.fullmatch(text)) == inside, text
    assert not pattern.fullmatch("-0")


def test_a_zod_strict_schema_with_integer_bounds_is_a_grammar() -> None:
    """zod 4 writes `.int()` as the safe-integer bounds and `.positive()` as exclusiveMinimum: strict passes."""
    schema = {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991},
            "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 20}, "maxItems": 3},
        },
        "required": ["count", "score", "tags"],
        "additionalProperties": False,
    }
    grammar = schema_grammar(schema, strict=True)
    assert "char{1,20}" in grammar and "tags-more{0,2}" in grammar


def test_a_long_max_length_is_a_bounded_repetition_not_nesting() -> None:
    """H1: `maxLength: 100000` made a grammar nested 100,000 deep (llama.cpp's parser crashed on it)."""
    grammar = schema_grammar({"type": "string", "maxLength": 100000}, strict=True)
    assert len(grammar) < 1000 and "((" not in grammar
    counts = [int(count) for count in re.findall(r"\{(?:\d+,)?(\d+)\}", grammar)]
    assert counts and max(counts) <= 2000


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        ({"type": "string", "minLength": 100000, "maxLength": 10**12}, "maxLength"),
        ({"type": "array", "items": {"type": "string"}, "maxItems": 10**9}, "maxItems"),
        ({"type": "string", "maxLength": -1}, "maxLength"),
        ({"type": "integer", "minimum": 5, "maximum": 2}, ""),
        ({"type": "string", "pattern": "a{0,100000}"}, "pattern"),
    ],
)
def test_a_bound_past_what_a_grammar_holds_is_a_400_naming_it(schema: dict[str, Any], field: str) -> None:
    wrapped = {"type": "object", "properties": {"x": schema}}
    with pytest.raises(HypnosError) as caught:
        schema_grammar(wrapped, strict=False)
    assert caught.value.status == 400
    assert f"`{WHERE}.properties.x{'.' + field if field else ''}`" in caught.value.message


def test_many_long_strings_past_the_grammar_cap_are_a_400() -> None:
    properties = {f"p{index}": {"type": "string", "maxLength": 2000} for index in range(40)}
    with pytest.raises(HypnosError) as caught:
        schema_grammar({"type": "object", "properties": properties}, strict=True)
    assert caught.value.status == 400 and "too large" in caught.value.message


def _sample(tiny_gguf: Path, grammar: str, seed: int, steps: int = 40) -> str:
    """What the tiny random model writes under `grammar` (temperature 1, a seed)."""
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaContext, LlamaModel, context_shape
    from hypnos_llama.sampling import SamplingParams, SlotSampler

    model = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    context = LlamaContext(model, LlamaOptions(), context_shape(256, 1, 64, 64))
    sampler = SlotSampler(model, SamplingParams(temperature=1.0, seed=seed, grammar=grammar))
    try:
        return sample_text(model, context, sampler, "hello", steps)[0].decode()
    finally:
        sampler.free()
        context.close()
        model.close()


def test_llama_cpp_holds_integer_bounds_and_lengths_on_the_tiny_model(tiny_gguf: Path) -> None:
    """Random weights write whatever the grammar allows: every answer is within the schema's bounds."""
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 3, "maximum": 41},
            "s": {"type": "string", "minLength": 2, "maxLength": 4},
        },
        "required": ["n", "s"],
        "additionalProperties": False,
    }
    grammar = schema_grammar(schema, strict=True)
    for seed in range(4):
        answer = json.loads(_sample(tiny_gguf, grammar, seed))
        assert 3 <= answer["n"] <= 41 and 2 <= len(answer["s"]) <= 4


def test_llama_cpp_parses_a_long_bounded_string(tiny_gguf: Path) -> None:
    from hypnos_llama.options import LlamaOptions
    from hypnos_llama.runtime import LlamaModel
    from hypnos_llama.sampling import grammar_sampler

    model = LlamaModel(tiny_gguf, LlamaOptions(), 0)
    try:
        for bound in ({"maxLength": 100000}, {"minLength": 3000, "maxLength": 250000}, {"minLength": 2001}):
            sampler = grammar_sampler(model.lib, model.vocab, schema_grammar({"type": "string", **bound}, strict=True))
            assert sampler is not None, bound
            model.lib.llama_sampler_free(sampler)
    finally:
        model.close()


class _Rules:
    """Records the rules multiple_rule adds (a converter's `_add_rule`)."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}

    def _add_rule(self, name: str, body: str) -> str:
        self.rules[name] = body
        return name


def _ends(rules: dict[str, str], expression: str, text: str, start: int) -> set[int]:
    """Where matches of a GBNF expression (literals, classes, `?`, groups, rule names, alternatives) starting at
    `start` of `text` end."""
    tokens = re.findall(r'"[^"]*"|\[[^\]]*\]|[()|?]|[A-Za-z0-9-]+', expression)

    def alternatives(index: int, positions: set[int]) -> tuple[set[int], int]:
        found, index2 = sequence(index, positions)
        while index2 < len(tokens) and tokens[index2] == "|":
            more, index2 = sequence(index2 + 1, positions)
            found |= more
        return found, index2

    def sequence(index: int, positions: set[int]) -> tuple[set[int], int]:
        while index < len(tokens) and tokens[index] not in ("|", ")"):
            token = tokens[index]
            if token == "(":
                after, index = alternatives(index + 1, positions)
                index += 1  # the ")"
            else:
                after = set()
                for position in positions:
                    if token.startswith('"'):
                        literal = token[1:-1]
                        if text.startswith(literal, position):
                            after.add(position + len(literal))
                    elif token.startswith("["):
                        if position < len(text) and text[position] in token[1:-1]:
                            after.add(position + 1)
                    else:
                        after |= _ends(rules, rules[token], text, position)
                index += 1
            if index < len(tokens) and tokens[index] == "?":
                after |= positions
                index += 1
            positions = after
        return positions, index

    return alternatives(0, {start})[0]


@pytest.mark.parametrize(
    ("k", "low", "high"), [(1, None, None), (3, None, None), (7, 0, None), (25, 1, None), (12, -30, 100)]
)
def test_an_integer_multiple_of_allows_exactly_its_multiples(k: int, low: int | None, high: int | None) -> None:
    from hypnos_llama.schema_multiple import multiple_rule, multiple_units

    schema = {"type": "integer", "multipleOf": k}
    assert multiple_units(schema, (low, high)) is not None
    rules = _Rules()
    body = multiple_rule(rules, schema, (low, high), "n")
    for value in range(-400, 400):
        inside = value % k == 0 and (low is None or value >= low) and (high is None or value <= high)
        assert (len(str(value)) in _ends(rules.rules, body, str(value), 0)) == inside, (value, body)
    for text in ("-0", "05", "-", str(k * 10**16)):  # the last: a multiple of 17 digits or more
        assert len(text) not in _ends(rules.rules, body, text, 0)
    if high is None:
        assert len(str(k * 10**14)) in _ends(rules.rules, body, str(k * 10**14), 0)


def test_a_strict_integer_multiple_of_is_a_grammar_and_a_fraction_a_400() -> None:
    """multipleOf on an integer is held by the grammar under strict; a number's (0.01) is still a 400 naming it, and a
    range without any multiple is a 400."""
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "multipleOf": 5}, "m": {"type": "integer", "minimum": 0}},
        "required": ["n"],
    }
    assert re.search(r"-m4-1 ::= ", schema_grammar(schema, strict=True))
    for bad, field in (
        ({"type": "number", "multipleOf": 0.01}, "multipleOf"),
        ({"type": "integer", "multipleOf": 1.5}, "multipleOf"),
        ({"type": "integer", "multipleOf": 5, "minimum": -5000}, "multipleOf"),
        ({"type": "integer", "multipleOf": 5, "minimum": 1, "maximum": 4}, ""),
    ):
        with pytest.raises(HypnosError) as caught:
            schema_grammar({"type": "object", "properties": {"x": bad}}, strict=True)
        assert caught.value.status == 400
        assert f"`{WHERE}.properties.x{'.' + field if field else ''}`" in caught.value.message


def test_llama_cpp_holds_integer_multiples_on_the_tiny_model(tiny_gguf: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "multipleOf": 7},
            "b": {"type": "integer", "minimum": 0, "maximum": 100, "multipleOf": 15},
            "c": {"type": "integer", "exclusiveMinimum": 0, "multipleOf": 4},
        },
        "required": ["a", "b", "c"],
        "additionalProperties": False,
    }
    grammar = schema_grammar(schema, strict=True)
    for seed in range(4):
        answer = json.loads(_sample(tiny_gguf, grammar, seed, steps=160))
        assert answer["a"] % 7 == 0 and answer["b"] in range(0, 101, 15), answer
        assert answer["c"] > 0 and answer["c"] % 4 == 0, answer
