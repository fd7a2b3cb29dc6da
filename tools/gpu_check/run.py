"""The check itself: on a machine without a GPU a dry run of the folder, on a GPU every path within the budget."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from tools.gpu_check.carry import FOLDER, GROUPS, ROOT, check_folder, read_manifest
from tools.gpu_check.table import NO_DEVICE, Row, render, summary

BUDGET_SECS = 480.0  # the whole table, on the device
PATH_SECS = 150.0  # one path at most


def all_paths() -> list[str]:
    """Every CUDA path, in the table's order."""
    from tools.gpu_check.paths import CHECKS

    return list(CHECKS)


def has_gpu() -> bool:
    """Whether an NVIDIA GPU answers (`nvidia-smi -L` lists one); HYPNOS_GPU_CHECK=dry forces the dry run."""
    if os.environ.get("HYPNOS_GPU_CHECK") == "dry" or shutil.which("nvidia-smi") is None:
        return False
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return done.returncode == 0 and "GPU" in done.stdout


def not_carried_notes(manifest: dict | None) -> dict[str, str]:
    """path -> why it cannot travel (its wheel group does not fit), for the groups the manifest left out."""
    left_out = (manifest or {}).get("not_carried", {})
    notes: dict[str, str] = {}
    for group in GROUPS:
        if group.name in left_out:
            for path in group.paths:
                notes[path] = f"not carried ({left_out[group.name]})"
    return notes


def dry_run_rows(manifest: dict | None) -> list[Row]:
    """Every path "no device", with what would keep it from running on one."""
    notes = not_carried_notes(manifest)
    return [Row(path=path, note=f"{NO_DEVICE}; {notes[path]}" if path in notes else NO_DEVICE) for path in all_paths()]


def dry_run(folder: Path = FOLDER) -> int:
    """Check the folder and print the table with every path "no device"; 1 when the folder is not ready."""
    problems, skipped = check_folder(folder)
    print(render(dry_run_rows(read_manifest(folder)), "GPU check (dry run: no GPU on this machine)"))
    for line in skipped:
        print(f"not carried: {line}")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("the folder is ready for the device" if not problems else "the folder is NOT ready")
    return 1 if problems else 0


def run_path(name: str, work: Path, timeout: float) -> Row:
    """One path in a process of its own (a crash or a hang costs that row only)."""
    command = [sys.executable, "-m", "tools.gpu_check.paths", name, str(work)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return Row(path=name, ran=True, passed=False, note=f"timed out after {timeout:.0f} s")
    lines = done.stdout.strip().splitlines()
    try:
        return msgspec.json.decode(lines[-1], type=Row)
    except (IndexError, msgspec.DecodeError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Row(path=name, ran=True, passed=False, note=f"exit {done.returncode}: {tail[:160]}")


def device_run(budget: float = BUDGET_SECS) -> int:
    """Every path within `budget` seconds; prints the table (and writes it to $OUT/gpu_table.md when OUT is set)."""
    from tools.gpu_check.paths import NEEDS

    notes = not_carried_notes(read_manifest(FOLDER))
    started = time.monotonic()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="hypnos-gpu-") as tmp:
        for name in all_paths():
            left = budget - (time.monotonic() - started)
            module = NEEDS.get(name)
            if module is not None and importlib.util.find_spec(module) is None:
                rows.append(Row(path=name, note=notes.get(name, f"{module} is not installed")))
            elif left < 10:
                rows.append(Row(path=name, note="the time budget was spent"))
            else:
                rows.append(run_path(name, Path(tmp), min(PATH_SECS, left)))
            print(
                f"{name}: {'passed' if rows[-1].passed else 'not passed'} {rows[-1].figure} {rows[-1].note}", flush=True
            )
    device = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout.strip()
    title = f"GPU check, {time.strftime('%Y-%m-%d', time.gmtime())}, {device.splitlines()[0] if device else '?'}"
    table = render(rows, title) + "\n" + summary(rows)
    print(table)
    if out := os.environ.get("OUT"):
        Path(out, "gpu_table.md").write_text(table + "\n", encoding="utf-8")
    return 0 if all(r.passed for r in rows if r.ran) else 1
