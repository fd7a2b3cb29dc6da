"""The model-pool overlay `<config name>.models.toml`: pool changes made while serving, applied at the next start.

The overlay holds `removed` (ids of the config's models taken out) and `[[models]]` blocks (added models, and
replacements of the config's models under their id). It is written atomically (temp file, fsync, rename), so a
crash at any moment leaves the old or the new overlay; the config file itself is never rewritten.
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from hypnos.config import ConfigError, ModelConfig, Settings, settings_from_mapping
from hypnos.config_checks import MAX_BLOCK_CHARS
from hypnos.tomlw import dumps

logger = logging.getLogger(__name__)

OVERLAY_VERSION = 1


def overlay_path(config_path: str | Path) -> Path:
    """`hypnos.toml` -> `hypnos.models.toml`, next to the config."""
    path = Path(config_path)
    return path.with_name(f"{path.stem}.models.toml")


def validate_model_block(block: dict[str, Any], source: str) -> ModelConfig:
    """One `[[models]]` table checked by the config loader's own validation; ConfigError naming what is wrong."""
    return settings_from_mapping({"models": [block]}, source).models[0]


def parse_model_block(text: str, source: str) -> dict[str, Any]:
    """The single `[[models]]` table of a TOML text (POST /v1/models `config`); ConfigError otherwise."""
    if len(text) > MAX_BLOCK_CHARS:
        raise ConfigError(f"{source}: at most {MAX_BLOCK_CHARS} characters for one [[models]] block, got {len(text)}")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: not valid TOML ({error})") from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid TOML (arrays or tables nested too deeply)") from None
    models = raw.pop("models", None)
    if raw:
        raise ConfigError(f"{source}: only a [[models]] block is accepted here, not `{', '.join(sorted(raw))}`")
    if not isinstance(models, list) or len(models) != 1 or not isinstance(models[0], dict):
        raise ConfigError(f"{source}: expected exactly one [[models]] block")
    return models[0]


class PoolOverlay:
    """The overlay's content (raw `[[models]]` tables by id, removed ids) and its atomic writer."""

    def __init__(self, path: Path | None, base_ids: list[str]) -> None:
        self.path = path
        self.base_ids = list(base_ids)
        self.models: dict[str, dict[str, Any]] = {}
        self.removed: list[str] = []
        self.rejected: dict[str, str] = {}  # id -> why its block failed the checks at start (kept, not served)

    @classmethod
    def read(cls, path: Path | None, base_ids: list[str]) -> PoolOverlay:
        """The overlay at `path` (an empty one when there is no file); ConfigError when it is broken."""
        overlay = cls(path, base_ids)
        if path is None or not path.exists():
            return overlay
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"{path}: the model-pool overlay cannot be read ({error})") from None
        removed = raw.get("removed", [])
        models = raw.get("models", [])
        if not isinstance(removed, list) or not all(isinstance(i, str) for i in removed):
            raise ConfigError(f"{path}: `removed`: expected a list of model ids")
        tables = isinstance(models, list) and all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in models)
        if not tables:
            raise ConfigError(f"{path}: `models`: expected [[models]] tables with an id")
        overlay.removed = [i for i in removed if i in base_ids]
        overlay.models = {m["id"]: m for m in models}
        return overlay

    def apply(self, settings: Settings) -> Settings:
        """Settings whose models are the config's with the overlay applied (replaced in place, added last)."""
        if not self.models and not self.removed:
            return settings
        blocks = self._valid_blocks(str(self.path))
        models: list[ModelConfig] = []
        for model in settings.models:
            if model.id in self.removed:
                continue
            models.append(blocks.pop(model.id, model))
        models.extend(blocks.values())
        return msgspec.structs.replace(settings, models=models)

    def _valid_blocks(self, source: str) -> dict[str, ModelConfig]:
        """The overlay's blocks that pass the config checks; the others are reported and kept in the file, unserved."""
        blocks = {}
        for model_id, block in self.models.items():
            try:
                blocks[model_id] = validate_model_block(copy.deepcopy(block), source)
            except ConfigError as error:
                self.rejected[model_id] = str(error)
                logger.error(
                    "the model %r of the pool overlay fails the config checks and is not served "
                    "(its block stays in the file: fix or remove it): %s",
                    model_id[:128],
                    error,
                )
        return blocks

    def put(self, block: dict[str, Any]) -> None:
        """Record an added or replacing model."""
        model_id = block["id"]
        self.models[model_id] = block
        if model_id in self.removed:
            self.removed.remove(model_id)

    def drop(self, model_id: str) -> None:
        """Record a removal."""
        self.models.pop(model_id, None)
        if model_id in self.base_ids and model_id not in self.removed:
            self.removed.append(model_id)

    def text(self) -> str:
        """The overlay file's TOML."""
        header = (
            "# Hypnos model-pool overlay: changes made with POST/PUT/DELETE /v1/models, applied at start.\n"
            "# Written by the server; the config file itself is never rewritten.\n"
        )
        body = {"overlay_version": OVERLAY_VERSION, "removed": list(self.removed), "models": list(self.models.values())}
        return header + dumps(body)

    def write(self) -> bool:
        """Write atomically (temp file, fsync, rename, fsync of the folder); False when it could not be written."""
        if self.path is None:
            return False
        try:
            atomic_write(self.path, self.text().encode("utf-8"))
        except OSError as error:
            logger.warning("the model-pool overlay %s could not be written: %s", self.path, error)
            return False
        return True


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content."""
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    try:
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def load_pool(settings: Settings) -> tuple[Settings, PoolOverlay]:
    """The settings with the overlay next to their config applied, and the overlay (None path: no config file)."""
    path = overlay_path(settings.source) if settings.source else None
    if path is not None and path.parent.is_dir():
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # a write cut short by a crash
            stale.unlink(missing_ok=True)
    overlay = PoolOverlay.read(path, [m.id for m in settings.models])
    return overlay.apply(settings), overlay
