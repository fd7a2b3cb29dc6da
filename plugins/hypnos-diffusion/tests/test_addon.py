"""`./run.sh --with images`: the tiny pipeline is written whole or not at all, and the starter config then serves it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import hypnos_diffusion.testing as tiny
import pytest
from hypnos.plugins import make_plugin_manager
from hypnos_server.starter import write_starter_config


def _starter(models_dir: Path, out: Path) -> list[dict]:
    write_starter_config(make_plugin_manager(allow={"diffusion"}), models_dir, out)
    return tomllib.loads(out.read_text())["models"]  # type: ignore[no-any-return]


def test_a_failed_write_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tiny.write_tiny_pipeline

    def dies_midway(folder: Path) -> Path:
        real(folder)  # every file written, then the process fails before the folder is complete
        raise OSError("No space left on device")

    monkeypatch.setattr(tiny, "write_tiny_pipeline", dies_midway)
    with pytest.raises(OSError):
        tiny.main([str(tmp_path)])
    assert list(tmp_path.iterdir()) == []
    assert _starter(tmp_path, tmp_path.parent / "starter.toml") == []


def test_the_written_pipeline_joins_the_starter_config(tmp_path: Path) -> None:
    models = tmp_path / "models"
    assert _starter(models, tmp_path / "before.toml") == []
    assert tiny.main([str(models)]) == 0
    assert [p.name for p in models.iterdir()] == ["tiny-sd"]
    assert _starter(models, tmp_path / "after.toml") == [tiny.model_table("tiny-sd")]
