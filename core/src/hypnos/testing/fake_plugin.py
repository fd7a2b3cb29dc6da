"""The fake engine as a plugin module, for registration through the `hypnos` entry point in tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos.engine import EngineKind
from hypnos.gguf_arch import GgufHeaderError, gguf_architecture
from hypnos.hookspecs import hookimpl
from hypnos.testing.fake_engine import fake_engine_kind


@hookimpl
def hypnos_engine_kinds() -> list[EngineKind]:
    """The fake engine kind."""
    return [fake_engine_kind()]


@hookimpl
def hypnos_describe_model_files(path: Path) -> dict[str, Any] | None:
    """A `.gguf` file runs on the fake engine as a chat model (tests of `hypnos add` and `hypnos show`)."""
    if path.suffix != ".gguf" or not path.is_file():
        return None
    try:
        architecture = gguf_architecture(path)
    except (OSError, GgufHeaderError):
        return None
    block = {"modality": "text_generation", "engine": "fake", "weights_path": str(path)}
    return {"block": block, "facts": {"architecture": architecture, "file_bytes": path.stat().st_size}}
