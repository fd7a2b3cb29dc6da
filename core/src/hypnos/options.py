"""Typed engine options: each engine kind's `[models.<table>]` Structs, decoded and checked once at config load."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from hypnos.config import ConfigError, ModelConfig, Settings

if TYPE_CHECKING:
    from hypnos.engine import EngineKind


def decode_table(model: ModelConfig, table: str, struct: type[Any], source: str) -> Any:
    """One `[models.<table>]` decoded into its Struct; a ConfigError naming file, model, table and key."""
    raw = model.engine_options.get(table, {})
    if isinstance(raw, struct):
        return raw
    try:
        return msgspec.convert(raw, struct, strict=True)
    except msgspec.ValidationError as error:
        text, _, where = str(error).partition(" - at `$")
        key = where.rstrip("`").lstrip(".")
        unknown = re.match(r"Object contains unknown field `([^`]*)`", text)
        if unknown:
            key, text = (f"{key}.{unknown.group(1)}" if key else unknown.group(1)), "unknown key"
        where_key = f"key `{key}`" if key else "the table"
        raise ConfigError(f"{source}: model `{model.id}`: [models.{table}] {where_key}: {text[:200]}") from None


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
