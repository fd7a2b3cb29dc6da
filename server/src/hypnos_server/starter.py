"""`hypnos starter`: ask every installed plugin for its starter models and write a config with them (atomically)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pluggy

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _value(value: Any) -> str:
    """A TOML value for strings, numbers, booleans, dates and flat arrays."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _table_lines(header: str, table: dict[str, Any]) -> list[str]:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    lines = [header] + [f"{_key(k)} = {_value(v)}" for k, v in scalars.items()]
    for name, sub in tables.items():
        inner = header.strip("[]")
        lines.append("")
        lines.extend(_table_lines(f"[{inner}.{_key(name)}]", sub))
    return lines


def render_config(models_dir: str, models: Iterable[dict[str, Any]]) -> str:
    """The TOML text of a config holding models_dir and one `[[models]]` table per model."""
    lines = ["# Written by `hypnos starter`: the starter models of the installed plugins.", "config_version = 1"]
    lines.append(f"models_dir = {_value(models_dir)}")
    for model in models:
        scalars = {k: v for k, v in model.items() if not isinstance(v, dict)}
        lines.append("")
        lines.append("[[models]]")
        lines.extend(f"{_key(k)} = {_value(v)}" for k, v in scalars.items())
        for name, sub in model.items():
            if isinstance(sub, dict):
                lines.append("")
                lines.extend(_table_lines(f"[models.{_key(name)}]", sub))
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Write to a temp file beside `path`, fsync, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def starter_models(manager: pluggy.PluginManager, models_dir: Path) -> list[dict[str, Any]]:
    """Every plugin's starter `[[models]]` tables, in plugin order."""
    models: list[dict[str, Any]] = []
    for batch in manager.hook.hypnos_starter_models(models_dir=models_dir):
        models.extend(batch or [])
    return models


def write_starter_config(manager: pluggy.PluginManager, models_dir: Path, out: Path) -> int:
    """Collect the starter models and write the config; the number of models written."""
    models_dir.mkdir(parents=True, exist_ok=True)
    models = starter_models(manager, models_dir)
    write_atomically(out, render_config(str(models_dir.resolve()), models))
    return len(models)
