"""Optional arguments a small model fills with the schema's own description of them, dropped from its calls.

The 0.5B starter, shown Codex's `exec_command`, writes `"justification": "User-facing approval question for
`require_escalated`; omit otherwise."`: the property's description, copied as its value. No caller means that text
as an argument, and Codex refuses the whole call for it (a justification asks for a sandbox escalation). An optional
string argument whose value restates its description (the same words, or the description's start) is left out of
the call; required arguments are kept as written.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

logger = logging.getLogger(__name__)
# A value shorter than this (in letters and digits) restates nothing: "path", "auto", a file name
MIN_RESTATED = 16
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def optional_descriptions(tools: Iterable[Any]) -> dict[str, dict[str, str]]:
    """Per declared function: its optional top-level string properties' descriptions (as words)."""
    found: dict[str, dict[str, str]] = {}
    for tool in tools:
        schema = tool.function.parameters
        if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
            continue
        required = set(schema.get("required") or [])
        described = {
            key: _words(spec["description"])
            for key, spec in schema["properties"].items()
            if key not in required
            and isinstance(spec, dict)
            and spec.get("type") == "string"
            and isinstance(spec.get("description"), str)
            and len(_words(spec["description"]).replace(" ", "")) >= MIN_RESTATED
        }
        if described:
            found[tool.function.name] = described
    return found


def restates(value: str, description: str) -> bool:
    """True when `value` (a string argument) is its property's `description`, or the description's start."""
    words = _words(value)
    return len(words.replace(" ", "")) >= MIN_RESTATED and description.startswith(words)


def without_restated(name: str, arguments: str, descriptions: Mapping[str, Mapping[str, str]]) -> str:
    """A call's JSON arguments without the optional string arguments that restate their description (unchanged when
    none does)."""
    described = descriptions.get(name)
    if not described:
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
        if key in described and isinstance(value, str) and restates(value, described[key])
    ]
    if not dropped:
        return arguments
    logger.debug("call %s: left out %s, each its property's description restated", name, dropped)
    return json.dumps({key: value for key, value in values.items() if key not in dropped}, ensure_ascii=False)
