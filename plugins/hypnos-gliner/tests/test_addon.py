"""`./run.sh --with entities`: the tiny model is written whole or not at all, and the starter config then serves it."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from hypnos.plugins import make_plugin_manager
from hypnos_gliner.testing import main
from hypnos_server.starter import write_starter_config


def _starter_ids(models_dir: Path, out: Path) -> list[str]:
    write_starter_config(make_plugin_manager(allow={"gliner"}), models_dir, out)
    return [model["id"] for model in tomllib.loads(out.read_text())["models"]]


def test_without_onnx_the_writer_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` fails as it does without the package
    with pytest.raises(Exception, match="onnx"):
        main([str(tmp_path)])
    assert list(tmp_path.iterdir()) == []


def test_the_written_model_joins_the_starter_config(tmp_path: Path) -> None:
    models = tmp_path / "models"
    assert "gliner-tiny" not in _starter_ids(models, tmp_path / "before.toml")
    assert main([str(models)]) == 0
    assert {"model.onnx", "model.safetensors"} <= {p.name for p in (models / "gliner-tiny").iterdir()}
    assert [p.name for p in models.iterdir()] == ["gliner-tiny"]  # no temp folder left beside it
    assert "gliner-tiny" in _starter_ids(models, tmp_path / "after.toml")
    config = tomllib.loads((tmp_path / "after.toml").read_text())
    entry = next(m for m in config["models"] if m["id"] == "gliner-tiny")
    assert entry == {"id": "gliner-tiny", "modality": "entity_extraction", "engine": "gliner",
                     "weights_path": "gliner-tiny", "slots": 8, "gliner": {"runtime": "auto"}}  # fmt: skip
