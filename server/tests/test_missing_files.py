"""A model whose file is missing says which key and how to get the file, in /v1/memory/status and its 503."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypnos.engine import EngineKind
from hypnos.hookspecs import hookimpl
from hypnos.testing.fake_engine import FakeEngine
from hypnos.types import Modality
from litestar.testing import TestClient
from server_kit import build_app, error_of, wait_ready


class FileEngine(FakeEngine):
    """A fake engine that reads its weights file when it estimates, as real engines do."""

    def estimate(self) -> Any:  # type: ignore[override]
        Path(self.model.weights_path or "").stat()
        return super().estimate()


class FilePlugin:
    @hookimpl
    def hypnos_engine_kinds(self) -> list[EngineKind]:
        return [EngineKind(name="files", modalities=frozenset({Modality.TEXT_GENERATION}), factory=FileEngine)]


def test_a_missing_weights_file_names_the_key_and_the_commands_that_get_it(tmp_path: Path) -> None:
    missing = tmp_path / "models" / "absent.gguf"
    raw = {"models": [{"id": "m", "modality": "text_generation", "engine": "files", "weights_path": str(missing)}]}
    with TestClient(build_app(raw, [FilePlugin()])) as client:
        wait_ready(client)
        (model,) = client.get("/v1/memory/status").json()["models"]
        reason = model["unavailable_reason"]
        assert f"`weights_path` = '{missing}' is missing" in reason and "hypnos pull" in reason
        assert "FileNotFoundError" not in reason and "Errno" not in reason
        asked = client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert asked.status_code == 503 and "hypnos starter" in error_of(asked)["message"]
