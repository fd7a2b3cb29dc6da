"""The `engine` (the API's closed EngineKind) and `backend` the wire reports for a configured engine name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from hypnos.types import KNOWN_ENGINE_KINDS, SPEC_KIND_BY_MODALITY, Modality

if TYPE_CHECKING:
    from hypnos.engine import EngineKind


def wire_engine(engine: str, modality: Modality | str, kinds: Mapping[str, EngineKind]) -> tuple[str, str]:
    """(engine, backend) for a config's `engine` name: the installed kind's declared spec kind and backend; for a
    kind not installed, the name itself when it is a spec kind, else the spec kind of the model's modality."""
    try:
        primary = Modality(modality)
    except ValueError:  # a plugin's catalog entry naming no known modality
        primary = Modality.TEXT_GENERATION
    kind = kinds.get(engine)
    if kind is not None:
        return kind.wire_kind(primary), kind.wire_backend
    if engine in KNOWN_ENGINE_KINDS:
        return engine, engine
    return SPEC_KIND_BY_MODALITY[primary], engine
