"""Typed engine options: each engine kind's `[models.<table>]` Structs, decoded and checked once at config load."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hypnos.config import ConfigError, ModelConfig, Settings
from hypnos.option_tables import decode_table

if TYPE_CHECKING:
    from hypnos.engine import EngineKind


def decode_engine_options(model: ModelConfig, kind: EngineKind, source: str) -> dict[str, Any]:
    """Check the model's tables against the kind and decode each declared one (defaults when absent)."""
    for table in model.engine_options:
        if table not in kind.tables:
            known = ", ".join(f"[models.{name}]" for name in sorted(kind.tables)) or "none"
            raise ConfigError(
                f"{source}: model `{model.id}`: unknown table [models.{table}] for the engine `{kind.name}` "
                f"(it reads {known})"
            )
    return {table: decode_table(model, table, struct, source) for table, struct in kind.options.items()}


def check_engine_options(settings: Settings, kinds: Mapping[str, EngineKind]) -> dict[str, dict[str, Any]]:
    """Decode every configured model's option tables (models of kinds not installed are skipped): per model id,
    table -> Struct. The first problem raises a one-line ConfigError naming file, model, table and key."""
    source = settings.source or "<config>"
    return {
        model.id: decode_engine_options(model, kinds[model.engine], source)
        for model in settings.models
        if model.engine in kinds
    }
