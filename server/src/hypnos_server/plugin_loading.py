"""The server's plugin loading: core's loading with the server's hookspecs added, and the routes the plugins bring."""

from __future__ import annotations

from collections.abc import Iterable

import pluggy
from hypnos.plugins import PluginLoad, allow_list_from_env, load_plugins, make_plugin_manager

from hypnos_server import hookspecs

SERVER_HOOKSPECS = (hookspecs,)


def load_server_plugins(
    allow: Iterable[str] | None = None, autoload: bool = True, plugins: Iterable[object] = ()
) -> PluginLoad:
    """core's load_plugins() with the server's hooks known (a plugin's `hypnos_routes` is no problem)."""
    return load_plugins(allow, autoload, plugins, SERVER_HOOKSPECS)


def server_plugin_manager(
    allow: Iterable[str] | None = None, autoload: bool = True, plugins: Iterable[object] = ()
) -> pluggy.PluginManager:
    """core's make_plugin_manager() with the server's hooks known."""
    return make_plugin_manager(allow, autoload, plugins, SERVER_HOOKSPECS)


def installed_plugin_manager() -> pluggy.PluginManager:
    """The manager of every installed plugin HYPNOS_PLUGINS allows, with the server's hooks known."""
    return server_plugin_manager(allow=allow_list_from_env())


def add_server_hooks(manager: pluggy.PluginManager) -> pluggy.PluginManager:
    """Add the server's hookspecs to a manager built by core alone (unless it has them); the manager."""
    caller = getattr(manager.hook, "hypnos_routes", None)
    if caller is None or not caller.has_spec():
        manager.add_hookspecs(hookspecs)
    return manager


def collect_routes(manager: pluggy.PluginManager) -> list[object]:
    """Every route handler or router the registered plugins bring."""
    routes: list[object] = []
    for batch in add_server_hooks(manager).hook.hypnos_routes():
        routes.extend(batch or [])
    return routes
