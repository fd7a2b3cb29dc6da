"""write_folder_atomically: a model folder appears whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypnos.kit.starter import write_folder_atomically


def _writer(files: dict[str, str], fail: bool = False):  # type: ignore[no-untyped-def]
    def build(folder: Path) -> None:
        for name, text in files.items():
            (folder / name).write_text(text)
        if fail:
            raise RuntimeError("Module onnx is not installed!")

    return build


def test_a_build_lands_whole(tmp_path: Path) -> None:
    dest = write_folder_atomically(tmp_path / "tiny", _writer({"config.json": "{}", "model.onnx": "x"}))
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "model.onnx"]
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]
    assert dest.stat().st_mode & 0o777 == 0o755


def test_a_failing_build_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="onnx"):
        write_folder_atomically(tmp_path / "tiny", _writer({"config.json": "{}"}, fail=True))
    assert list(tmp_path.iterdir()) == []


def test_a_failing_rebuild_keeps_the_old_folder(tmp_path: Path) -> None:
    write_folder_atomically(tmp_path / "tiny", _writer({"config.json": "old"}))
    with pytest.raises(RuntimeError):
        write_folder_atomically(tmp_path / "tiny", _writer({"config.json": "new"}, fail=True))
    assert (tmp_path / "tiny" / "config.json").read_text() == "old"
    write_folder_atomically(tmp_path / "tiny", _writer({"model.onnx": "new"}))
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]
    assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == ["model.onnx"]
