"""response_format as a llama.cpp grammar: any JSON object, or JSON valid against a schema (section 7.1)."""

from __future__ import annotations

import json
from typing import Any

from hypnos.chat import ChatInput
from hypnos.errors import invalid_request

WHERE = "response_format.json_schema.schema"
# Keywords llama.cpp's JSON-Schema-to-grammar converter does not enforce: with `strict` each is a 400 naming where it
# is; without, they are read as hints (the grammar enforces the rest).
UNENFORCED = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
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
    would not enforce)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    if strict:
        _check(schema, WHERE)
    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError) as error:
        detail = str(error) or type(error).__name__
        raise invalid_request(f"`{WHERE}` cannot be turned into a grammar: {detail[:200]}") from None


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
    """400 when llama.cpp cannot parse the grammar for this model's vocabulary (built once and freed)."""
    from hypnos_llama.sampling import grammar_sampler

    sampler = grammar_sampler(model.lib, model.vocab, grammar)
    if sampler is None:
        raise invalid_request(f"`{WHERE}` gives a grammar llama.cpp cannot parse")
    model.lib.llama_sampler_free(sampler)


def forced_call_grammar(format_name: str | None, request: ChatInput) -> str | None:
    """For a forced call (tool_choice "required" or a named function) in the Hermes format (Qwen): the grammar of
    the rest of the call after the forced prefix: a declared name, then arguments valid against that function's
    JSON Schema, then the closing tag. None for other formats, or when a schema cannot be expressed (the call is
    then forced by its prefix alone)."""
    if format_name != "hermes" or not request.wants_tools or request.tool_choice != "required":
        return None
    from llama_cpp.llama_grammar import SchemaConverter

    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    tools = [tool for tool in request.tools if request.forced_tool in (None, tool.function.name)]
    alternatives = []
    try:
        for index, tool in enumerate(tools):
            schema = tool.function.parameters or {"type": "object"}
            schema = converter.resolve_refs(schema, f"tool{index}")
            arguments = converter.visit(schema, f"tool{index}-arguments")
            if request.forced_tool is not None:  # the prefix ends with `"arguments": `
                alternatives.append(arguments)
            else:  # the prefix ends with `{"name": "`
                name = converter._format_literal(json.dumps(tool.function.name)[1:] + ', "arguments": ')
                alternatives.append(f"{name} {arguments}")
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError):
        return None
    if not alternatives:
        return None
    close = converter._format_literal("}\n</tool_call>")
    converter._add_rule("root", "(" + " | ".join(alternatives) + f") {close}")
    return converter.format_grammar()
