"""A parsed call's arguments cleaned against its function's schema: what no caller can mean is left out.

- Keys the schema does not declare, when it allows no others (`additionalProperties: false`). The grammar holds a
  call to its schema, but a call it did not hold (a trigger whose text it refused) is parsed as written: the 0.5B
  starter called Claude Code's `Read` with a `content` key, and Claude Code refused the call.
- Optional string arguments whose value restates the property's own description (the same words, the
  description's start, or all of it and more). Shown Codex's `exec_command`, the 0.5B wrote `"justification":
  "User-facing approval question for `require_escalated`; omit otherwise."`, and Codex refuses a justification
  without an escalation.
Required arguments and every other value stay as written.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)
# A value shorter than this (in letters and digits) restates nothing: "path", "auto", a file name
MIN_RESTATED = 16
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


@dataclass(frozen=True)
class ArgumentRules:
    """One function's rules: its declared keys when it allows no others (None: any key), and its optional string
    properties' descriptions (as words)."""

    closed: frozenset[str] | None = None
    described: dict[str, str] = field(default_factory=dict)


def argument_rules(tools: Iterable[Any]) -> dict[str, ArgumentRules]:
    """Per declared function with an object schema: the rules its calls' arguments are cleaned by."""
    found: dict[str, ArgumentRules] = {}
    for tool in tools:
        schema = tool.function.parameters
        if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
            continue
        properties: dict[str, Any] = schema["properties"]
        required = set(schema.get("required") or [])
        described = {
            key: _words(spec["description"])
            for key, spec in properties.items()
            if key not in required
            and isinstance(spec, dict)
            and spec.get("type") == "string"
            and isinstance(spec.get("description"), str)
            and len(_words(spec["description"]).replace(" ", "")) >= MIN_RESTATED
        }
        closed = frozenset(properties) if schema.get("additionalProperties") is False else None
        if described or closed is not None:
            found[tool.function.name] = ArgumentRules(closed, described)
    return found


def restates(value: str, description: str) -> bool:
    """True when `value` (a string argument) is its property's `description`, the description's start, or the whole
    description with more after it."""
    words = _words(value)
    return len(words.replace(" ", "")) >= MIN_RESTATED and (
        description.startswith(words) or words.startswith(description)
    )


def cleaned_arguments(name: str, arguments: str, rules: Mapping[str, ArgumentRules]) -> str:
    """A call's JSON arguments without the keys its function's rules leave out (unchanged when none is)."""
    rule = rules.get(name)
    if rule is None:
        return arguments
    try:
        values = json.loads(arguments)
    except ValueError:
        return arguments
    if not isinstance(values, dict):
        return arguments
    dropped = [
        key
        for key, value in values.items()
        if (rule.closed is not None and key not in rule.closed)
        or (key in rule.described and isinstance(value, str) and restates(value, rule.described[key]))
    ]
    if not dropped:
        return arguments
    logger.debug("call %s: left out %s (undeclared, or the property's description restated)", name, dropped)
    return json.dumps({key: value for key, value in values.items() if key not in dropped}, ensure_ascii=False)
