"""response_format as a llama.cpp grammar: any JSON object, or JSON valid against a schema (section 7.1)."""

from __future__ import annotations

from typing import Any

from hypnos.chat import ChatInput
from hypnos.errors import invalid_request

from hypnos_llama.schema_gbnf import bounded_converter, check_bounds, integer_bounds
from hypnos_llama.schema_multiple import multiple_units
from hypnos_llama.tool_grammar import CallGrammar, auto_call_grammar, forced_call_grammar

WHERE = "response_format.json_schema.schema"
# The largest grammar text llama.cpp is given (the repetitions in it are bounded apart: schema_gbnf.GRAMMAR_UNITS)
MAX_GRAMMAR_CHARS = 1 << 20
# Keywords the grammar does not enforce: with `strict` each is a 400 naming where it is; without, they are read as
# hints (the grammar enforces the rest). Bounds (minimum / maximum / exclusive*, min/maxLength, min/maxItems) are
# enforced (hypnos_llama.schema_gbnf), and an integer's multipleOf where schema_multiple.py can hold it.
UNENFORCED = frozenset(
    {
        "multipleOf",
        "not",
        "if",
        "then",
        "else",
        "patternProperties",
        "propertyNames",
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "minProperties",
        "maxProperties",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)
FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"})
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")


def _check(schema: Any, path: str) -> None:
    """400 naming the first part of `schema` the grammar cannot enforce."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise invalid_request(f"`{path}` must be a JSON Schema object")
    for key in schema:
        if key == "multipleOf" and multiple_units(schema, integer_bounds(schema)) is not None:
            continue  # an integer's multiples: held by the grammar (schema_multiple.py)
        if key in UNENFORCED:
            raise invalid_request(f"`{path}.{key}` cannot be enforced by the sampler's grammar (strict schema)")
    fmt = schema.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise invalid_request(f"`{path}.format` `{fmt}` cannot be enforced by the sampler's grammar (strict schema)")
    ref = schema.get("$ref")
    if ref is not None and not str(ref).startswith("#"):
        raise invalid_request(f"`{path}.$ref` must point inside the schema (`#/...`), not to `{ref}`")
    for key in SUBSCHEMA_LISTS:
        for index, sub in enumerate(schema.get(key) or []):
            _check(sub, f"{path}.{key}[{index}]")
    for key in SUBSCHEMA_MAPS:
        for name, sub in (schema.get(key) or {}).items():
            _check(sub, f"{path}.{key}.{name}")
    for key in ("items", "additionalProperties"):
        sub = schema.get(key)
        if isinstance(sub, list):
            for index, item in enumerate(sub):
                _check(item, f"{path}.{key}[{index}]")
        elif sub is not None:
            _check(sub, f"{path}.{key}")


def schema_grammar(schema: dict[str, Any], *, strict: bool) -> str:
    """The GBNF grammar of a JSON Schema; 400 naming the part it cannot express (with `strict`, also the parts it
    would not enforce, and any bound beyond what a grammar holds)."""
    check_schema(schema, strict=strict)
    converter = bounded_converter()
    try:
        converter.visit(converter.resolve_refs(schema, "stdin"), "")
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError) as error:
        detail = str(error) or type(error).__name__
        raise invalid_request(f"`{WHERE}` cannot be turned into a grammar: {detail[:200]}") from None
    return converter.format_grammar()


def check_schema(schema: Any, *, strict: bool) -> int:
    """400 naming the first part of a response_format schema the grammar cannot hold (bounds always; with
    `strict`, every keyword it would not enforce); the grammar units its bounds take."""
    units = check_bounds(schema, WHERE)  # first: the bounds _check reads are numbers
    if strict:
        _check(schema, WHERE)
    return units


def json_object_grammar() -> str:
    """The grammar of one JSON object (response_format json_object)."""
    from llama_cpp.llama_grammar import JSON_GBNF

    return JSON_GBNF


def response_grammar(request: ChatInput) -> str | None:
    """The grammar the request's answer must follow, or None (plain text)."""
    wanted = request.response_format
    if wanted is None or wanted.type == "text":
        return None
    if wanted.type == "json_object" or wanted.schema is None:
        return json_object_grammar()
    return schema_grammar(wanted.schema, strict=wanted.strict)


def check_grammar(model: Any, grammar: str) -> None:
    """400 when the grammar is larger than MAX_GRAMMAR_CHARS, or llama.cpp cannot parse it for this model's
    vocabulary (built once and freed)."""
    from hypnos_llama.sampling import grammar_sampler

    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise invalid_request(
            f"the request's schemas (response_format, tools) make a grammar of {len(grammar):,} characters; "
            f"at most {MAX_GRAMMAR_CHARS:,}"
        )
    sampler = grammar_sampler(model.lib, model.vocab, grammar)
    if sampler is None:
        raise invalid_request("the request's schemas (response_format, tools) give a grammar llama.cpp cannot parse")
    model.lib.llama_sampler_free(sampler)


def request_grammar(format_name: str | None, request: ChatInput, *, forced: bool) -> CallGrammar | None:
    """What constrains a request's output, or None (free text): a forced call's grammar after its prefix (a
    response_format then holds nothing: the answer is the call); with tool_choice "auto" on a JSON-calling family,
    the lazy call grammar, or `call | answer` when a response_format holds the final answer; else the
    response_format's grammar."""
    if forced:
        text = forced_call_grammar(format_name, request)
        return CallGrammar(text) if text is not None else None
    wanted = request.response_format
    answer: dict[str, Any] | None = None
    spent = 0
    if wanted is not None and wanted.type != "text":
        answer = {"type": "object"}
        if wanted.type == "json_schema" and wanted.schema is not None:
            spent = check_schema(wanted.schema, strict=wanted.strict)
            answer = wanted.schema
    if request.wants_tools and (call := auto_call_grammar(format_name, request, answer, spent)) is not None:
        return call
    text = response_grammar(request)
    return CallGrammar(text) if text is not None else None
