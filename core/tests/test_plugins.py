"""The plugin manager: entry points, the allow-list, broken plugins skipped, engine kinds collected."""

from __future__ import annotations

import logging
import types
from importlib import metadata

import pytest
from hypnos import plugins
from hypnos.engine import EngineKind
from hypnos.hookspecs import hookimpl
from hypnos.plugins import allow_list_from_env, collect_engine_kinds, make_plugin_manager
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
