"""`hypnos starter`: ask every installed plugin for its starter models and write a config with them (atomically)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pluggy
from hypnos.overlay import atomic_write
from hypnos.tomlw import dumps


def render_config(models_dir: str, models: Iterable[dict[str, Any]]) -> str:
    """The TOML text of a config holding models_dir and one `[[models]]` table per model."""
    header = "# Written by `hypnos starter`: the starter models of the installed plugins.\n"
    return header + dumps({"config_version": 1, "models_dir": models_dir, "models": list(models)})


def write_atomically(path: Path, text: str) -> None:
    """Write to a temp file beside `path`, fsync, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode("utf-8"))


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
