"""The model pool while the server runs: the startup checks of an added model, the change, and the overlay."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from hypnos.config import ConfigError, ModelConfig
from hypnos.config_checks import pool_env_problems
from hypnos.engine import EngineKind
from hypnos.errors import invalid_request
from hypnos.overlay import PoolOverlay, atomic_write, parse_model_block, validate_model_block
from hypnos.scheduler import ModelState, Scheduler

from hypnos_server.catalog import ROLE_KEYS, Catalog, catalog_spec_block

logger = logging.getLogger(__name__)


def file_reasons(model: ModelConfig, roots: list[Path], config: str | None, pull_spec: str | None = None) -> list[str]:
    """Why the model's files are not usable through the pool API: outside models_dir and server.model_roots (a
    symlink counts where it points), or missing; each reason says what to change."""
    root = roots[0]
    reasons = []
    for key in ROLE_KEYS.values():
        relative = getattr(model, key)
        if relative is None:
            continue
        path = model.resolve(root, relative)
        if path is None:
            continue
        resolved = path.resolve()
        if not any(resolved.is_relative_to(allowed) for allowed in roots):
            where = f" or server.model_roots ({', '.join(map(str, roots[1:]))})" if len(roots) > 1 else ""
            points = "" if resolved == path else f" (it points to {resolved})"
            reasons.append(
                f"`{key}` = {relative!r}{points} is outside models_dir ({root}){where}: the pool API takes files "
                f"only from those folders; add `{resolved.parent}` to `server.model_roots` in {config or 'the config'}"
                " and restart, or name the file in the config file itself"
            )
        elif not path.exists():
            fix = f"download it with `hypnos pull {pull_spec}`" if pull_spec else "put the file there"
            reasons.append(f"`{key}` = {relative!r}: no such file in models_dir ({root}); {fix}")
    return reasons


def architecture_reasons(
    model: ModelConfig, models_dir: Path, catalog: Catalog | None, kind: EngineKind | None
) -> list[str]:
    """The weights of a model whose kind reads architectures must report one the catalog tested with that kind."""
    if kind is None or kind.architecture_of is None or model.weights_path is None or catalog is None:
        return []
    path = model.resolve(models_dir.resolve(), model.weights_path)
    if path is None or not path.is_file():
        return []
    try:
        found = kind.architecture_of(path)
    except (OSError, ValueError) as error:
        return [f"`weights_path` = {model.weights_path!r} cannot be read by the `{kind.name}` engine ({error})"]
    tested = catalog.tested_architectures_of(kind.name)
    if found not in tested:
        listed = ", ".join(tested)
        return [f"the weights report the architecture `{found}`, which is not among the tested ones ({listed})"]
    return []


class ModelPool:
    """POST/PUT/DELETE /v1/models: checks, the scheduler's change, and the overlay kept in step with it."""

    def __init__(
        self, scheduler: Scheduler, overlay: PoolOverlay, catalog: Catalog | None, cluster: Any = None
    ) -> None:
        self.scheduler = scheduler
        self.cluster = cluster  # a ClusterBackend: every change is applied on each node too
        self.overlay = overlay
        self.catalog = catalog
        self._write_lock = asyncio.Lock()

    def block_of(self, catalog_spec: str | None, config_text: str | None) -> dict[str, Any]:
        """The [[models]] table a POST/PUT body names (exactly one of `catalog` and `config`)."""
        if (catalog_spec is None) == (config_text is None):
            raise invalid_request(
                "send exactly one of `catalog` (a catalog id[:quant]) and `config` (a [[models]] block)"
            )
        if catalog_spec is not None:
            if self.catalog is None:
                raise invalid_request("this server has no model catalog; send a `config` block")
            return catalog_spec_block(self.catalog, catalog_spec)
        try:
            return parse_model_block(config_text or "", "config")
        except ConfigError as error:
            raise invalid_request(str(error)) from None

    def check(self, block: dict[str, Any]) -> ModelConfig:
        """The startup checks: config validation, engine installed, files in models_dir, the weights' architecture."""
        try:
            model = validate_model_block(block, "config")
        except ConfigError as error:
            raise invalid_request(f"the model failed the config validation: {error}") from None
        settings = self.scheduler.settings
        models_dir = settings.models_path
        reasons = pool_env_problems(model.process.env)
        kinds = self.scheduler.engine_kinds
        if model.engine not in kinds:
            reasons.append(f"the engine kind `{model.engine}` is not installed (installed: {', '.join(sorted(kinds))})")
        reasons += file_reasons(model, settings.model_root_paths, settings.source, self._catalog_spec(model.id))
        reasons += architecture_reasons(model, models_dir, self.catalog, kinds.get(model.engine))
        if reasons:
            raise invalid_request(f"the model `{model.id}` failed the startup checks: " + "; ".join(reasons))
        return model

    def _catalog_spec(self, model_id: str) -> str | None:
        """The catalog id of a model, when the catalog has it (what `hypnos pull` downloads)."""
        if self.catalog is None or model_id not in self.catalog.entries:
            return None
        return model_id

    async def _record(self, change: str, model_id: str, block: dict[str, Any] | None) -> bool:
        """Update the overlay and write it atomically; False when it could not be written."""
        async with self._write_lock:
            if block is None:
                self.overlay.drop(model_id)
            else:
                self.overlay.put(block)
            path = self.overlay.path
            if path is None:
                return False
            data = self.overlay.text().encode("utf-8")
            try:
                await asyncio.to_thread(atomic_write, path, data)
            except OSError as error:
                logger.warning("the pool change (%s %s) is live but not persisted: %s", change, model_id, error)
                return False
            return True

    async def add(self, block: dict[str, Any]) -> tuple[ModelState, bool]:
        """Add the model; (its state, persisted)."""
        model = self.check(block)
        persisted: list[bool] = []

        async def commit() -> None:
            persisted.append(await self._record("add", model.id, block))

        state = await self.scheduler.pool.add(model, commit)
        await self._on_nodes("add", model.id, model, 0.0)
        return state, persisted[0]

    async def replace(self, model_id: str, block: dict[str, Any], drain_secs: float) -> tuple[ModelState, bool]:
        """Replace the model under its id (the block's own id is ignored)."""
        self.scheduler.get(model_id)  # 404 before the checks
        block = {**block, "id": model_id}
        model = self.check(block)
        persisted: list[bool] = []

        async def commit() -> None:
            persisted.append(await self._record("replace", model_id, block))

        state = await self.scheduler.pool.replace(model_id, model, drain_secs, commit)
        await self._on_nodes("replace", model_id, model, drain_secs)
        return state, persisted[0]

    async def remove(self, model_id: str, drain_secs: float) -> bool:
        """Remove the model; persisted."""
        persisted: list[bool] = []

        async def commit() -> None:
            persisted.append(await self._record("remove", model_id, None))

        await self.scheduler.pool.remove(model_id, drain_secs, commit)
        await self._on_nodes("remove", model_id, None, drain_secs)
        return persisted[0]

    async def _on_nodes(self, action: str, model_id: str, model: ModelConfig | None, drain_secs: float) -> None:
        """Apply a change made here on every node of the cluster (nothing on one machine)."""
        if self.cluster is not None:
            await self.cluster.pool_change(action, model_id, model, drain_secs)
