"""The dry run's checks of the folder that travels to the device, on folders built here."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from tools.gpu_check import carry, run
from tools.gpu_check.carry import GROUPS, MANIFEST, SDIST_MEMBERS, check_folder, groups_digest, offline_resolve


def make_folder(root: Path, *, members: list[str] = SDIST_MEMBERS, carried: list[str] | None = None) -> Path:
    """A folder as gpu-prepare leaves it: a small sdist with `members`, one wheel file, the manifest."""
    wheels = root / "wheels"
    wheels.mkdir(parents=True)
    sdist = wheels / "llama_cpp_python-0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for member in members:
            info = tarfile.TarInfo(f"llama_cpp_python-0.0/{member}")
            info.size = 2
            tar.addfile(info, io.BytesIO(b"x\n"))
    wheel = wheels / "msgspec-0-py3-none-any.whl"
    wheel.write_bytes(b"0" * 100)
    names = carried if carried is not None else [g.name for g in GROUPS]
    manifest = {
        "digest": groups_digest(),
        "sdist": "wheels/" + sdist.name,
        "files": {"wheels/" + sdist.name: sdist.stat().st_size, "wheels/" + wheel.name: 100},
        "carried": {name: [] for name in names},
        "not_carried": {g.name: "31.0 MiB of wheels, 15.2 MiB left" for g in GROUPS if g.name not in names},
    }
    (root / MANIFEST).write_text(json.dumps(manifest))
    return root


def test_a_complete_folder_has_no_problem(tmp_path: Path) -> None:
    assert check_folder(make_folder(tmp_path), resolve=False) == ([], [])


def test_a_missing_folder_says_to_prepare(tmp_path: Path) -> None:
    problems, _ = check_folder(tmp_path / "nothing", resolve=False)
    assert len(problems) == 1 and "gpu-prepare" in problems[0]


def test_a_missing_or_changed_wheel_is_a_problem(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    (folder / "wheels/msgspec-0-py3-none-any.whl").write_bytes(b"0" * 99)
    assert any("99 bytes" in p for p in check_folder(folder, resolve=False)[0])
    (folder / "wheels/msgspec-0-py3-none-any.whl").unlink()
    assert any("msgspec-0-py3-none-any.whl is missing" in p for p in check_folder(folder, resolve=False)[0])


def test_a_folder_over_the_cap_is_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_folder(tmp_path)
    monkeypatch.setattr(carry, "tree_bytes", lambda: 0)
    monkeypatch.setattr(carry, "CAP_BYTES", 150)
    assert any("over the 0 MiB" in p for p in check_folder(folder, resolve=False)[0])


def test_the_working_tree_travels_too_and_counts_against_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_folder(tmp_path)
    assert check_folder(folder, resolve=False)[0] == []
    monkeypatch.setattr(carry, "tree_bytes", lambda: carry.CAP_BYTES)
    problems, _ = check_folder(folder, resolve=False)
    assert len(problems) == 1 and "the working tree (64.0 MiB)" in problems[0]


def test_the_working_tree_is_what_git_would_send(tmp_path: Path) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "kept.txt").write_bytes(b"x" * 1000)
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "big.bin").write_bytes(b"x" * 100_000)
    assert carry.tree_bytes(tmp_path) == 1000 + len("ignored/\n")


def test_an_sdist_without_the_cuda_sources_is_a_problem(tmp_path: Path) -> None:
    cuda = "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt"
    folder = make_folder(tmp_path, members=[m for m in SDIST_MEMBERS if m != cuda])
    problems, _ = check_folder(folder, resolve=False)
    assert len(problems) == 1 and cuda in problems[0]


def test_a_folder_made_for_other_groups_is_stale(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "digest": "old"}))
    assert any("other wheel groups" in p for p in check_folder(folder, resolve=False)[0])


def test_optional_groups_left_out_are_listed_and_their_paths_say_so(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, carried=["base", "llama"])
    problems, skipped = check_folder(folder, resolve=False)
    assert problems == [] and any(line.startswith("diffusion: 31.0 MiB") for line in skipped)
    rows = {row.path: row for row in run.dry_run_rows(carry.read_manifest(folder))}
    assert set(rows) == set(run.all_paths())
    assert all(not row.ran and row.note.startswith("no device") for row in rows.values())
    assert "not carried" in rows["diffusers group offload"].note and rows["llama full offload"].note == "no device"


def test_a_required_group_left_out_fails_the_dry_run(tmp_path: Path) -> None:
    problems, _ = check_folder(make_folder(tmp_path, carried=["base"]), resolve=False)
    assert problems == ["the llama group does not travel; the check needs it"]


def test_a_requirement_the_folder_lacks_does_not_resolve_offline(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    reason = offline_resolve(tmp_path / "wheels", ["msgspec>=0.18"])
    assert reason is not None and "msgspec" in reason


def test_every_path_of_every_group_is_in_the_table() -> None:
    paths = set(run.all_paths())
    assert {path for group in GROUPS for path in group.paths} <= paths
