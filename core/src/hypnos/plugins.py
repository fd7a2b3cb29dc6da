"""Builds the plugin manager from the `hypnos` entry-point group, honouring an allow-list, and reports the plugins
that fail to import or implement a hook Hypnos does not define."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

import msgspec
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


class PluginProblem(msgspec.Struct, frozen=True):
    """A plugin that cannot be used as installed: its name, its distribution, and why."""

    plugin: str
    error: str
    distribution: str | None = None

    def line(self) -> str:
        """One line naming the plugin (and its distribution) and what is wrong."""
        where = f" (distribution {self.distribution})" if self.distribution else ""
        return f"plugin `{self.plugin}`{where}: {self.error}"


class PluginSource(msgspec.Struct, frozen=True):
    """Where a registered plugin came from: its distribution's name and version (None for one passed in)."""

    distribution: str | None = None
    version: str | None = None


@dataclass
class PluginLoad:
    """A plugin manager with what each plugin came from and the problems found while loading and checking them."""

    manager: pluggy.PluginManager
    sources: dict[str, PluginSource] = field(default_factory=dict)
    problems: list[PluginProblem] = field(default_factory=list)


def _source(entry: EntryPoint) -> PluginSource:
    dist = getattr(entry, "dist", None)
    if dist is None:
        return PluginSource()
    return PluginSource(distribution=dist.metadata["Name"] or getattr(dist, "name", None), version=dist.version)


def _register(load: PluginLoad, plugin: object, name: str | None, source: PluginSource) -> None:
    try:
        registered = load.manager.register(plugin, name=name)
    except pluggy.PluginValidationError as error:  # a hook whose arguments are not the spec's
        load.problems.append(PluginProblem(name or repr(plugin), str(error), source.distribution))
        return
    if registered is not None:
        load.sources[registered] = source


def pending_hooks(manager: pluggy.PluginManager) -> list[PluginProblem]:
    """pluggy's check_pending() for every plugin, not only the first: each hook implemented that no spec module of
    the manager defines (a misspelled hook name), as a problem naming its plugin."""
    callers = sorted((name, caller) for name, caller in vars(manager.hook).items() if not name.startswith("_"))
    known = ", ".join(name for name, caller in callers if caller.has_spec())
    problems: list[PluginProblem] = []
    for name, caller in callers:
        if caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if not impl.optionalhook:
                error = f"`{name}` is not a Hypnos hook (misspelled?); the hooks are {known}"
                problems.append(PluginProblem(impl.plugin_name, error))
    return problems


def load_plugins(
    allow: Iterable[str] | None = None,
    autoload: bool = True,
    plugins: Iterable[object] = (),
    specs: Iterable[ModuleType | type] = (),
) -> PluginLoad:
    """The plugins of entry-point group `hypnos` (only `allow`ed ones when given) plus `plugins`, registered in a
    fresh manager with core's hookspecs and the extra spec modules `specs` (the server's routes hook); one that fails
    to import or register, or implements a hook no spec defines, is a problem (the first two are skipped, the last
    stays registered)."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    for spec in specs:
        manager.add_hookspecs(spec)
    load = PluginLoad(manager)
    allowed = set(allow) if allow is not None else None
    if autoload:
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            if allowed is not None and entry.name not in allowed:
                continue
            if manager.has_plugin(entry.name):
                continue
            source = _source(entry)
            try:
                module = entry.load()
            except Exception as error:
                load.problems.append(
                    PluginProblem(entry.name, f"failed to import: {type(error).__name__}: {error}", source.distribution)
                )
                continue
            _register(load, module, entry.name, source)
    for plugin in plugins:  # named by module or class (pluggy's default is the object's id)
        name = getattr(plugin, "__name__", None) or type(plugin).__name__
        _register(load, plugin, name if not manager.has_plugin(name) else None, PluginSource())
    for problem in pending_hooks(manager):
        source = load.sources.get(problem.plugin, PluginSource())
        load.problems.append(msgspec.structs.replace(problem, distribution=source.distribution))
    return load


def make_plugin_manager(
    allow: Iterable[str] | None = None,
    autoload: bool = True,
    plugins: Iterable[object] = (),
    specs: Iterable[ModuleType | type] = (),
) -> pluggy.PluginManager:
    """A fresh plugin manager as load_plugins() builds it; each problem is logged as a warning (`hypnos serve`
    stops on them first, unless server.plugin_errors = "warn")."""
    load = load_plugins(allow, autoload, plugins, specs)
    for problem in load.problems:
        logger.warning("%s", problem.line())
    return load.manager


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
