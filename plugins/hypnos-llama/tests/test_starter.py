"""The starter model: parts joined in order from installed packages, verified, idempotent."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from hypnos.kit.starter import file_sha256
from hypnos_llama import starter
from hypnos_llama.starter import QWEN_CODER_0_5B, StarterWeights, join_starter, starter_models


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StarterWeights:
    """Two installed fake distributions, each holding one part."""
    site = tmp_path / "site"
    contents = [b"first part " * 1000, b"second part " * 700]
    for index, data in enumerate(contents, start=1):
        package = site / f"fakeparts{index}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{index:02d}.bin").write_bytes(data)
        info = site / f"fakeparts{index}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakeparts{index}\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(site))
    for index in (1, 2):
        sys.modules.pop(f"fakeparts{index}", None)
    return StarterWeights(
        filename="fake.gguf",
        sha256=hashlib.sha256(b"".join(contents)).hexdigest(),
        parts=tuple((f"fakeparts{i}", f"fakeparts{i}", f"data/part{i:02d}.bin") for i in (1, 2)),
        table=(("id", "fake"), ("engine", "ggml_llama")),
    )


def test_joins_verifies_and_skips_when_present(
    fake_parts: StarterWeights, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(starter, "STARTERS", (fake_parts,))
    models = tmp_path / "models"
    tables = starter_models(models)
    assert tables == [{"id": "fake", "engine": "ggml_llama", "weights_path": "fake.gguf"}]
    target = models / "fake.gguf"
    assert hashlib.sha256(target.read_bytes()).hexdigest() == fake_parts.sha256
    stamp = target.stat().st_mtime_ns
    starter_models(models)
    assert target.stat().st_mtime_ns == stamp
    assert [p.name for p in models.iterdir()] == ["fake.gguf"]


def test_a_wrong_digest_leaves_nothing_behind(fake_parts: StarterWeights, tmp_path: Path) -> None:
    broken = StarterWeights(fake_parts.filename, "0" * 64, fake_parts.parts, fake_parts.table)
    with pytest.raises(ValueError, match="sha256"):
        join_starter(broken, tmp_path / "out" / "fake.gguf")
    assert list((tmp_path / "out").iterdir()) == []


def test_nothing_when_packages_are_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = StarterWeights("x.gguf", "0" * 64, (("no-such-dist-hypnos", "nope", "data/x.bin"),), ())
    monkeypatch.setattr(starter, "STARTERS", (missing,))
    assert starter_models(tmp_path) == []


@pytest.mark.model
def test_real_qwen_parts_join_to_the_known_digest(qwen_models_dir: Path) -> None:
    path = qwen_models_dir / QWEN_CODER_0_5B.filename
    assert path.stat().st_size == 491400064
    assert QWEN_CODER_0_5B.sha256.startswith("1d961463")
    assert file_sha256(path) == QWEN_CODER_0_5B.sha256
