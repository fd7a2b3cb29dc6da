"""Tool-call grammars: a call names one of the declared functions and its arguments follow that function's schema.

With tool_choice "auto" the grammar is lazy (as llama.cpp's server does it): the model writes freely until a trigger,
the family's opener (`<tool_call>`) or, for families whose models also write calls as bare JSON, `{"name":` at the
start of the answer, before the name (llama.cpp's server waits for a declared name there); from there the call is
constrained. After the opener the name is one of the declared functions: a call of any other never comes out. With a
response_format too, the grammar is active from the first token: a call, or the answer under the schema (issue 40,
Build 7).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from hypnos.chat import ChatInput
from hypnos.errors import HypnosError

from hypnos_llama.formats.tool_formats import FENCE_TAG, NAME_TAIL, canonical, name_spellings, takes_tail
from hypnos_llama.schema_gbnf import bounded_converter, check_bounds

logger = logging.getLogger(__name__)
# A bare JSON call at the start of the answer, in a code fence (```json, ```markdown, ...) or not, alone or in a list,
# up to its name's colon: the grammar holds before the name is sampled, so the model picks among the declared names
# (an answer that starts a call has shown its intent; an undeclared name would only come out as text and no tool
# would run)
BARE_TRIGGER = r"^\s*(?:```" + FENCE_TAG + r'\s*)?\[?\s*\{\s*"name"\s*:'


@dataclass(frozen=True)
class CallShape:
    """How a JSON-calling family writes its calls: the region's delimiters, the arguments key, how several calls go
    together ("repeat": a region each; "list": one JSON list; "semicolon": joined by ';'), bare JSON or not."""

    open: str
    close: str
    key: str = "arguments"
    many: str = "repeat"
    bare: bool = False


SHAPES = {
    "hermes": CallShape("<tool_call>", "</tool_call>", bare=True),
    "llama3": CallShape("<|python_tag|>", "", key="parameters", many="semicolon", bare=True),
    "nemotron": CallShape("<TOOLCALL>", "</TOOLCALL>", many="list"),
    "mistral": CallShape("[TOOL_CALLS]", "", many="list"),
}


def call_opener(format_name: str | None) -> str | None:
    """The text that opens a call in a JSON-calling family (None for the other families)."""
    shape = SHAPES.get(format_name or "")
    return shape.open if shape is not None else None


@dataclass(frozen=True)
class CallGrammar:
    """A GBNF grammar and the trigger patterns (Python regexes; `^` ones anchored at the answer's start) that switch
    it on; no triggers: it holds from the first token."""

    grammar: str
    triggers: tuple[str, ...] = ()


def _literal(converter: Any, text: str) -> str:
    return converter._format_literal(text)


def check_tools(request: ChatInput, spent: int = 0) -> int:
    """400 naming a bound of a tool's parameters beyond what a grammar holds (all tools together, after `spent`
    units); the units spent."""
    for index, tool in enumerate(request.tools):
        spent = check_bounds(tool.function.parameters or {}, f"tools[{index}].function.parameters", spent)
    return spent


def _calls_rules(
    converter: Any, request: ChatInput, shape: CallShape, bare: bool, loose: frozenset[int] = frozenset()
) -> None:
    """Rules `call` (one call of a declared function) and `call-root` (what the family writes for its calls). The
    arguments of a tool in `loose` (or whose schema the converter cannot express) are any JSON object."""
    alternatives = []
    declared = [tool.function.name for tool in request.tools]
    for index, tool in enumerate(request.tools):
        arguments = None
        if index in loose:
            logger.debug("the arguments of %s are any JSON object: bounds past a grammar", tool.function.name)
        else:
            try:
                schema = converter.resolve_refs(tool.function.parameters or {"type": "object"}, f"tool{index}")
                arguments = converter.visit(schema, f"tool{index}-arguments")
            except (AssertionError, KeyError, ValueError, TypeError, RecursionError) as error:
                logger.debug("the arguments of %s are held to a JSON object only: %s", tool.function.name, error)
        if arguments is None:
            arguments = converter.visit({"type": "object"}, f"tool{index}-arguments")
        spellings = name_spellings(tool.function.name, declared)
        name = " | ".join(_literal(converter, json.dumps(spelling)[1:-1]) for spelling in spellings)
        tail = " call-name-tail?" if takes_tail(tool.function.name, declared) else ""
        name = f'"\\"" ({name}){tail} "\\""'
        key = _literal(converter, json.dumps(shape.key))
        alternatives.append(f'({name}) call-ws "," call-ws {key} call-ws ":" call-ws {arguments}')
    rules = {
        "call-ws": "[ \\t\\n]{0,8}",
        "call-name-tail": NAME_TAIL,
        "call": f'"{{" call-ws "\\"name\\"" call-ws ":" call-ws ({" | ".join(alternatives)}) call-ws "}}"',
        "call-list": '"[" call-ws call (call-ws "," call-ws call)* call-ws "]"',
    }
    opener, closer = _literal(converter, shape.open), _literal(converter, shape.close) if shape.close else ""
    if shape.many == "repeat":
        rules["call-region"] = f"{opener} call-ws call call-ws {closer}".strip()
        rules["call-regions"] = "call-region (call-ws call-region)*"
    elif shape.many == "list":
        rules["call-regions"] = f"{opener} call-ws call-list call-ws {closer}".strip()
    else:
        rules["call-regions"] = f'{opener} call-ws call (call-ws ";" call-ws call)*'
    body = "call-regions"
    if bare:
        rules["call-bare"] = f'call | call-list | "```" {FENCE_TAG} call-ws (call | call-list) call-ws "```"'
        body = "call-regions | call-bare"
    rules["call-root"] = f"[ \\t\\n]{{0,32}} ({body}) [ \\t\\n]{{0,8}}"
    for name, rule in rules.items():
        converter._add_rule(name, rule)


def after_result(request: ChatInput) -> bool:
    """True when the conversation ends with a tool result (the model answers from it)."""
    return bool(request.messages) and request.messages[-1].role == "tool"


def answered_calls(request: ChatInput) -> frozenset[tuple[str, str]]:
    """After a tool result: the (name, arguments as canonical JSON) of the calls the last assistant turn made."""
    if not after_result(request):
        return frozenset()
    for message in reversed(request.messages):
        if message.role == "assistant":
            return frozenset(
                (call.function.name, canonical(call.function.arguments)) for call in message.tool_calls or []
            )
    return frozenset()


def auto_call_grammar(
    format_name: str | None, request: ChatInput, answer: dict[str, Any] | None, spent: int = 0
) -> CallGrammar | None:
    """The grammar of tool_choice "auto" on a JSON-calling family: lazy (triggered) when the answer is free text,
    active from the start as `call | answer` when `answer` (the response_format's schema; {} for any JSON object)
    holds the final answer. None for families whose calls are not JSON. A tool whose schema a grammar cannot hold
    (bounds past the limits, keywords the converter lacks) keeps its name in the grammar, its arguments any JSON
    object: Claude Code declares one such tool among twelve, and with it no call of any was held."""
    shape = SHAPES.get(format_name or "")
    if shape is None or not request.tools:
        return None
    loose = set()
    for index, tool in enumerate(request.tools):
        try:
            spent = check_bounds(tool.function.parameters or {}, f"tools[{index}].function.parameters", spent)
        except HypnosError as error:  # a bound too large to hold: that tool's arguments are any object
            logger.debug("tool %s: %s", tool.function.name, error)
            loose.add(index)
    converter = bounded_converter()
    # After a tool result a bare JSON call is not a call form: small models echo the call they made that way
    bare = shape.bare and not after_result(request)
    try:
        _calls_rules(converter, request, shape, bare, frozenset(loose))
        answer_rule = None if answer is None else converter.visit(converter.resolve_refs(answer, "answer"), "answer")
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError):
        return None  # a schema the converter cannot express: the calls are parsed, not constrained
    if answer_rule is None:
        converter._add_rule("root", "call-root")
        triggers = [re.escape(shape.open)] + ([BARE_TRIGGER] if bare else [])
        return CallGrammar(converter.format_grammar(), tuple(triggers))
    converter._add_rule("root", f"call-root | {answer_rule}")
    return CallGrammar(converter.format_grammar())


def forced_call_grammar(format_name: str | None, request: ChatInput) -> str | None:
    """For a forced call (tool_choice "required" or a named function) in the Hermes format (Qwen): the grammar of
    the rest of the call after the forced prefix: a declared name, then arguments valid against that function's
    JSON Schema, then the closing tag. None for other formats, or when a schema cannot be expressed (the call is
    then forced by its prefix alone); 400 naming a schema bound beyond what a grammar holds."""
    if format_name != "hermes" or not request.wants_tools or request.tool_choice != "required":
        return None
    check_tools(request)
    converter = bounded_converter()
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
                name = _literal(converter, json.dumps(tool.function.name)[1:] + ', "arguments": ')
                alternatives.append(f"{name} {arguments}")
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError):
        return None
    if not alternatives:
        return None
    close = _literal(converter, "}\n</tool_call>")
    converter._add_rule("root", "(" + " | ".join(alternatives) + f") {close}")
    return converter.format_grammar()
