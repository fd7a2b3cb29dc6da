"""The fake engine as a plugin module, for registration through the `hypnos` entry point in tests."""

from __future__ import annotations

from hypnos.engine import EngineKind
from hypnos.hookspecs import hookimpl
from hypnos.testing.fake_engine import fake_engine_kind


@hookimpl
def hypnos_engine_kinds() -> list[EngineKind]:
    """The fake engine kind."""
    return [fake_engine_kind()]
