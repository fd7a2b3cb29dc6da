"""The plugin manager: entry points, the allow-list, broken and misspelled plugins reported, engine kinds collected."""

from __future__ import annotations

import logging
import types
from importlib import metadata

import pluggy
import pytest
from hypnos import plugins
from hypnos.engine import EngineKind
from hypnos.hookspecs import hookimpl, hookspec
from hypnos.plugins import allow_list_from_env, collect_engine_kinds, load_plugins, make_plugin_manager, pending_hooks
from hypnos.testing import fake_engine_kind, fake_plugin
from hypnos.types import Modality


class _EntryPoint:
    def __init__(self, name: str, target: object) -> None:
        self.name = name
        self._target = target

    def load(self) -> object:
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


def _with_entry_points(monkeypatch: pytest.MonkeyPatch, *points: _EntryPoint) -> None:
    monkeypatch.setattr(plugins, "entry_points", lambda group: list(points) if group == "hypnos" else [])


def test_registered_plugin_provides_its_engine_kind() -> None:
    manager = make_plugin_manager(autoload=False, plugins=[fake_plugin])
    kinds = collect_engine_kinds(manager)
    assert set(kinds) == {"fake"}
    assert kinds["fake"].modalities == frozenset(Modality)


def test_broken_plugin_is_logged_by_name_and_skipped(monkeypatch, caplog) -> None:
    _with_entry_points(
        monkeypatch, _EntryPoint("broken", ImportError("no module named torch")), _EntryPoint("fake", fake_plugin)
    )
    with caplog.at_level(logging.WARNING):
        manager = make_plugin_manager()
    assert "broken" in caplog.text and "no module named torch" in caplog.text
    assert set(collect_engine_kinds(manager)) == {"fake"}


def test_allow_list_keeps_only_named_plugins(monkeypatch) -> None:
    other = types.SimpleNamespace()
    other.hypnos_engine_kinds = hookimpl(lambda: [fake_engine_kind("other")])
    _with_entry_points(monkeypatch, _EntryPoint("fake", fake_plugin), _EntryPoint("other", other))
    assert set(collect_engine_kinds(make_plugin_manager(allow={"other"}))) == {"other"}
    assert set(collect_engine_kinds(make_plugin_manager())) == {"fake", "other"}


def test_allow_list_from_environment() -> None:
    assert allow_list_from_env({}) is None
    assert allow_list_from_env({"HYPNOS_PLUGINS": " llama, audio ,"}) == {"llama", "audio"}


def test_duplicate_engine_kind_keeps_the_first(caplog) -> None:
    second = types.SimpleNamespace()
    second.hypnos_engine_kinds = hookimpl(
        lambda: [
            EngineKind(
                name="fake", modalities=frozenset({Modality.VISION}), factory=lambda m, c: None, spec_kind="gliner"
            )
        ]  # type: ignore[arg-type,return-value]
    )
    manager = make_plugin_manager(autoload=False, plugins=[fake_plugin, second])
    with caplog.at_level(logging.WARNING):
        kinds = collect_engine_kinds(manager)
    assert len(kinds) == 1 and "provided twice" in caplog.text


def test_installed_fake_plugin_entry_point_is_discoverable() -> None:
    names = {entry.name for entry in metadata.entry_points(group="hypnos")}
    assert "fake" in names, "the core session installs tests/fake-plugin (noxfile PACKAGES)"
    assert "fake" in collect_engine_kinds(make_plugin_manager(allow={"fake"}))


class _Misspelled:
    @hookimpl
    def hypnos_engine_kind(self):  # the hook is hypnos_engine_kinds
        return [fake_engine_kind("typo")]


class _WrongArguments:
    @hookimpl
    def hypnos_starter_models(self, folder):  # the hook's argument is models_dir
        return []


def test_a_misspelled_hook_is_a_problem_naming_the_plugin_and_the_hook(caplog) -> None:
    load = load_plugins(autoload=False, plugins=[fake_plugin, _Misspelled()])
    (problem,) = load.problems
    assert problem.plugin == "_Misspelled" and "`hypnos_engine_kind`" in problem.error
    assert "hypnos_engine_kinds" in problem.error  # the hooks there are, to spot the typo
    assert "`_Misspelled`" in problem.line() and "\n" not in problem.line()
    with caplog.at_level(logging.WARNING):
        make_plugin_manager(autoload=False, plugins=[_Misspelled()])
    assert "hypnos_engine_kind" in caplog.text


def test_pending_hooks_agrees_with_pluggy_check_pending() -> None:
    clean = load_plugins(autoload=False, plugins=[fake_plugin])
    clean.manager.check_pending()
    assert clean.problems == [] and pending_hooks(clean.manager) == []
    broken = load_plugins(autoload=False, plugins=[_Misspelled()])
    with pytest.raises(pluggy.PluginValidationError):
        broken.manager.check_pending()
    assert len(pending_hooks(broken.manager)) == 1


def test_a_hook_with_wrong_arguments_is_a_problem_not_a_crash() -> None:
    load = load_plugins(autoload=False, plugins=[_WrongArguments(), fake_plugin])
    (problem,) = load.problems
    assert problem.plugin == "_WrongArguments" and "folder" in problem.error
    assert set(collect_engine_kinds(load.manager)) == {"fake"}


def test_an_entry_point_that_fails_to_import_is_a_problem_with_its_distribution(monkeypatch) -> None:
    point = metadata.EntryPoint("ghost", "hypnos_no_such_plugin_module.plugin", "hypnos")
    dist = types.SimpleNamespace(metadata={"Name": "hypnos-ghost"}, version="1.2")
    monkeypatch.setattr(metadata.EntryPoint, "dist", property(lambda self: dist), raising=False)
    _with_entry_points(monkeypatch, point, _EntryPoint("fake", fake_plugin))
    load = load_plugins()
    (problem,) = load.problems
    assert (problem.plugin, problem.distribution) == ("ghost", "hypnos-ghost")
    assert "ModuleNotFoundError" in problem.error and "hypnos_no_such_plugin_module" in problem.error
    assert set(collect_engine_kinds(load.manager)) == {"fake"}


class _RoutesPlugin:
    @hookimpl
    def hypnos_routes(self) -> list:
        return []


class _WebSpecs:
    """A spec module as the server adds one (core itself has no web hook)."""

    @hookspec
    def hypnos_routes(self) -> list:
        """Routes."""
        raise NotImplementedError


def test_core_alone_does_not_know_the_routes_hook_an_extra_spec_module_does() -> None:
    (problem,) = load_plugins(autoload=False, plugins=[fake_plugin, _RoutesPlugin()]).problems
    assert problem.plugin == "_RoutesPlugin" and "`hypnos_routes`" in problem.error
    load = load_plugins(autoload=False, plugins=[fake_plugin, _RoutesPlugin()], specs=[_WebSpecs])
    assert load.problems == []
    assert load.manager.hook.hypnos_routes() == [[]]
    typo = load_plugins(autoload=False, plugins=[_Misspelled()], specs=[_WebSpecs])
    assert "hypnos_routes" in typo.problems[0].error  # the hooks listed include the extra module's
