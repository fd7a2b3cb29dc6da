"""`hypnos plugins`: the installed plugins, their engine kinds, routes, speech detectors and option tables, and what
failed to load."""

from __future__ import annotations

from typing import Any

import msgspec
from hypnos.engine import EngineKind
from hypnos.plugins import PluginLoad, PluginProblem, PluginSource


class EngineKindEntry(msgspec.Struct, kw_only=True):
    """One engine kind a plugin provides: its name, modalities and `[models.<table>]` tables with their keys."""

    name: str
    modalities: list[str]
    options: dict[str, list[str]]  # table -> the keys its Struct accepts
    config_keys: list[str]  # further tables accepted undecoded
    description: str = ""


class PluginEntry(msgspec.Struct, kw_only=True):
    """One registered plugin: where it came from, its engine kinds and its routes."""

    name: str
    distribution: str | None
    version: str | None
    engine_kinds: list[EngineKindEntry]
    routes: list[str]
    speech_detectors: list[str] = []  # realtime server VAD detectors: `name: description`


class PluginsReport(msgspec.Struct, kw_only=True):
    """What `hypnos plugins --json` prints."""

    plugins: list[PluginEntry]
    failed: list[PluginProblem]


def _kind_entry(kind: EngineKind) -> EngineKindEntry:
    options = {table: list(getattr(struct, "__struct_fields__", ())) for table, struct in kind.options.items()}
    return EngineKindEntry(
        name=kind.name,
        modalities=sorted(m.value for m in kind.modalities),
        options=options,
        config_keys=sorted(kind.config_keys),
        description=kind.description,
    )


def route_paths(route: Any) -> list[str]:
    """A route handler's `METHOD /path` lines, a router's path, else its repr."""
    paths = getattr(route, "paths", None)
    if paths:
        methods = " ".join(sorted(getattr(route, "http_methods", None) or ()))
        return [f"{methods} {path}".strip() for path in sorted(paths)]
    path = getattr(route, "path", None)
    return [path] if isinstance(path, str) else [repr(route)]


def _results(load: PluginLoad, hook: str, failed: list[PluginProblem]) -> dict[str, list[Any]]:
    """Each plugin's answer to a no-argument hook; a hook that raises is a problem of its plugin."""
    out: dict[str, list[Any]] = {}
    caller = getattr(load.manager.hook, hook, None)  # a manager built by core alone has no server hooks
    for impl in caller.get_hookimpls() if caller is not None else []:
        try:
            out[impl.plugin_name] = list(impl.function() or [])
        except Exception as error:
            source = load.sources.get(impl.plugin_name, PluginSource())
            error_text = f"`{hook}` raised {type(error).__name__}: {error}"
            failed.append(PluginProblem(impl.plugin_name, error_text, source.distribution))
    return out


def plugins_report(load: PluginLoad) -> PluginsReport:
    """The report of a plugin load: every registered plugin, then every problem."""
    failed = list(load.problems)
    kinds = _results(load, "hypnos_engine_kinds", failed)
    routes = _results(load, "hypnos_routes", failed)
    detectors = _results(load, "hypnos_speech_detectors", failed)
    entries = []
    for name, _plugin in load.manager.list_name_plugin():
        source = load.sources.get(name, PluginSource())
        entries.append(
            PluginEntry(
                name=name,
                distribution=source.distribution,
                version=source.version,
                engine_kinds=[_kind_entry(kind) for kind in kinds.get(name, [])],
                routes=[path for route in routes.get(name, []) for path in route_paths(route)],
                speech_detectors=[f"{kind.name}: {kind.description}" for kind in detectors.get(name, [])],
            )
        )
    return PluginsReport(plugins=sorted(entries, key=lambda e: e.name), failed=failed)


def render_report(report: PluginsReport) -> str:
    """The report as text: a paragraph per plugin, then what failed."""
    lines: list[str] = []
    for plugin in report.plugins:
        where = f" ({plugin.distribution} {plugin.version or ''})".replace(" )", ")") if plugin.distribution else ""
        lines.append(f"{plugin.name}{where}")
        for kind in plugin.engine_kinds:
            lines.append(f"  engine kind {kind.name}: {', '.join(kind.modalities)}")
            for table, keys in kind.options.items():
                lines.append(f"    [models.{table}] {', '.join(keys)}")
            for table in kind.config_keys:
                lines.append(f"    [models.{table}]")
        for route in plugin.routes:
            lines.append(f"  route {route}")
        for detector in plugin.speech_detectors:
            lines.append(f"  speech detector {detector}")
    if not report.plugins:
        lines.append("no plugins installed")
    if report.failed:
        lines.append("failed:")
        lines.extend(f"  {problem.line()}" for problem in report.failed)
    return "\n".join(lines) + "\n"
