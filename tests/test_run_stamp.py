"""`./run.sh` installs only when something it installs changed (a stamp of its inputs in the venv), and `--with`
installs only the add-ons: run.sh is run in a copy of the repository's install files with a stand-in venv whose
`python` and `hypnos` only record how they were called (nothing is installed)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$CALLS"
if [ "${1:-}" = "--version" ]; then cat "$VERSION_FILE"; fi
exit 0
"""


def make_copy(tmp_path: Path) -> Path:
    """run.sh and every file it reads to decide what to install, in a folder of their own, with a stand-in venv."""
    repo = tmp_path / "repo"
    for pattern in ("run.sh", "*/pyproject.toml", "plugins/*/*.txt", "plugins/*/pyproject.toml", "plugins/*/*.py"):
        for source in ROOT.glob(pattern):
            if ".nox" in source.parts or ".venv" in source.parts:
                continue
            target = repo / source.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "hypnos"):
        (bin_dir / name).write_text(STAND_IN)
        (bin_dir / name).chmod(stat.S_IRWXU)
    (tmp_path / "version").write_text("Python 3.11.7\n")
    return repo


def run(repo: Path, *args: str, env_extra: dict[str, str] | None = None) -> list[str]:
    """Run ./run.sh ARGS; the stand-ins' calls, one a line."""
    calls = repo.parent / "calls"
    calls.write_text("")
    env = {**os.environ, "CALLS": str(calls), "VERSION_FILE": str(repo.parent / "version")}
    for name in ("HYPNOS_VENV", "HYPNOS_MODELS_DIR", "HYPNOS_STARTER_CONFIG", "CMAKE_ARGS", "HYPNOS_LLAMA_PORTABLE"):
        env.pop(name, None)
    env.update(env_extra or {})
    done = subprocess.run(["./run.sh", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines()


def installs(calls: list[str]) -> list[str]:
    return [call for call in calls if " -m pip install" in call]


def test_a_second_serve_installs_nothing_until_an_input_changes(tmp_path: Path) -> None:
    repo = make_copy(tmp_path)
    first = run(repo)
    assert any("-e core" in call for call in installs(first))  # the first serve installs
    assert first[-1].startswith("hypnos serve --config hypnos.starter.toml")
    second = run(repo)
    assert installs(second) == [] and not any("prebuild.py" in call for call in second)
    expected = [["python", "--version"], ["hypnos", "starter"], ["hypnos", "serve"]]
    assert [call.split()[:2] for call in second] == expected
    requirements = repo / "plugins" / "hypnos-audio" / "starter-requirements.txt"
    requirements.write_text(requirements.read_text() + "\n# changed\n")
    assert any("starter-requirements.txt" in call for call in installs(run(repo)))
    assert installs(run(repo)) == []
    (tmp_path / "version").write_text("Python 3.12.1\n")  # another Python in the venv
    assert installs(run(repo)) != []
    assert installs(run(repo, "install", "--check")) == []
    assert installs(run(repo, "install")) != []  # an explicit install always installs


def test_the_llama_build_key_is_an_input(tmp_path: Path) -> None:
    repo = make_copy(tmp_path)
    run(repo)
    assert any("prebuild.py" in call for call in run(repo, env_extra={"CMAKE_ARGS": "-DGGML_CUDA=on"}))
    assert not any("prebuild.py" in call for call in run(repo, env_extra={"CMAKE_ARGS": "-DGGML_CUDA=on"}))


def test_with_installs_only_the_addons_and_only_once(tmp_path: Path) -> None:
    repo = make_copy(tmp_path)
    run(repo)
    added = installs(run(repo, "serve", "--with", "images"))
    assert added and not any("-e core" in call for call in added)  # the base install is not redone
    assert any("hypnos-diffusion/addon-requirements.txt" in call for call in added)
    assert installs(run(repo, "serve", "--with", "images")) == []
    both = installs(run(repo, "serve", "--with", "images,entities"))  # a new add-on
    assert any("hypnos-gliner/addon-requirements.txt" in call for call in both)
