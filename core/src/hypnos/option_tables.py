"""One `[models.<table>]` decoded into its option Struct, with a ConfigError naming file, model, table and key."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from hypnos.config import ConfigError, ModelConfig


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
