"""Builds the plugin manager from the `hypnos` entry-point group, honouring an allow-list, skipping broken plugins."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from importlib.metadata import entry_points

import pluggy

from hypnos import hookspecs
from hypnos.engine import EngineKind

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "hypnos"
ALLOW_ENV = "HYPNOS_PLUGINS"


def allow_list_from_env(environ: dict[str, str] | os._Environ[str] | None = None) -> set[str] | None:
    """The plugin names of HYPNOS_PLUGINS (comma-separated), or None when unset (all installed plugins)."""
    value = (os.environ if environ is None else environ).get(ALLOW_ENV)
    if value is None or not value.strip():
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


def make_plugin_manager(
    allow: Iterable[str] | None = None, autoload: bool = True, plugins: Iterable[object] = ()
) -> pluggy.PluginManager:
    """A fresh plugin manager: entry points of group `hypnos` (only `allow`ed ones when given) plus `plugins`."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    allowed = set(allow) if allow is not None else None
    if autoload:
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            if allowed is not None and entry.name not in allowed:
                continue
            if manager.has_plugin(entry.name):
                continue
            try:
                module = entry.load()
            except Exception as error:  # a broken plugin never stops the server
                logger.warning("plugin %s failed to load and is skipped: %s", entry.name, error)
                continue
            manager.register(module, name=entry.name)
    for plugin in plugins:
        manager.register(plugin)
    return manager


def collect_engine_kinds(manager: pluggy.PluginManager) -> dict[str, EngineKind]:
    """Every engine kind the registered plugins provide, by name; a second kind with a taken name is skipped."""
    kinds: dict[str, EngineKind] = {}
    for batch in manager.hook.hypnos_engine_kinds():
        for kind in batch or []:
            if kind.name in kinds:
                logger.warning("engine kind %s is provided twice; keeping the first", kind.name)
                continue
            kinds[kind.name] = kind
    return kinds


def collect_routes(manager: pluggy.PluginManager) -> list[object]:
    """Every route handler or router the registered plugins bring."""
    routes: list[object] = []
    for batch in manager.hook.hypnos_routes():
        routes.extend(batch or [])
    return routes
