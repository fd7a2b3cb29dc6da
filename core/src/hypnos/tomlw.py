"""A small TOML writer for the files the server writes (the pool overlay, generated config blocks)."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import PurePath
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (str, PurePath)):
        return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _table(table: dict[str, Any], path: list[str], lines: list[str]) -> None:
    nested = []
    for key, value in table.items():
        if isinstance(value, dict) or _is_table_array(value):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested:
        header = ".".join(_key(p) for p in [*path, key])
        if isinstance(value, dict):
            lines.append(f"\n[{header}]")
            _table(value, [*path, key], lines)
        else:
            for item in value:
                lines.append(f"\n[[{header}]]")
                _table(item, [*path, key], lines)


def dumps(document: dict[str, Any]) -> str:
    """TOML text for a mapping of strings, numbers, booleans, lists and tables."""
    lines: list[str] = []
    _table(document, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"
