"""`nox -s gpu-prepare`: fill `.gpu/` with what the device machine lacks, at most CAP_BYTES.

Wheels for Python 3.12 manylinux x86-64 (pip download with --platform), group by group in GROUPS' order, and the
llama-cpp-python sdist trimmed to what a CUDA build reads (the published one is ~75 MB, mostly git history, vocab
test files and docs). A group that does not fit what is left is not carried; the manifest says so and why.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from tools.gpu_check.carry import (
    CAP_BYTES,
    FOLDER,
    GROUPS,
    MANIFEST,
    SDIST_DROP,
    WHEELS,
    Group,
    groups_digest,
    llama_pin,
    pip_platform_args,
    tree_bytes,
)

MARGIN = 2 * 1024 * 1024  # kept free for the manifest and for the working tree to grow a little


def pip_download(requirements: list[str], dest: Path, *, binary: bool = True, no_deps: bool = False) -> None:
    """pip download into dest (wheels for the device's platform, or an sdist with binary=False)."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(dest)]
    command += pip_platform_args() if binary else ["--no-binary", ":all:", "--no-deps"]
    command += ["--no-deps"] if no_deps and binary else []
    subprocess.run([*command, *requirements], check=True)


def trim_sdist(source: Path, dest: Path) -> Path:
    """The sdist without the members SDIST_DROP names, as dest/<same name> (a gzipped tar)."""
    drop = [re.compile(pattern) for pattern in SDIST_DROP]
    out = dest / source.name
    with tarfile.open(source) as tar_in, tarfile.open(out, "w:gz", compresslevel=9) as tar_out:
        for member in tar_in:
            inner = member.name.split("/", 1)[1] if "/" in member.name else ""
            if inner and any(pattern.search(inner) for pattern in drop):
                continue
            data = tar_in.extractfile(member) if member.isfile() else None
            tar_out.addfile(member, io.BytesIO(data.read()) if data is not None else None)
    return out


def group_files(group: Group, scratch: Path) -> list[Path]:
    """The wheels one group needs, downloaded into a folder of its own."""
    dest = scratch / group.name
    dest.mkdir()
    if group.requirements:
        pip_download(group.requirements, dest)
    if group.no_deps:
        pip_download(group.no_deps, dest, no_deps=True)
    return sorted(dest.iterdir())


def prepare(folder: Path = FOLDER) -> dict:
    """Make the folder afresh; returns the manifest written into it."""
    if folder.exists():
        shutil.rmtree(folder)
    wheels = folder / WHEELS
    wheels.mkdir(parents=True)
    files: dict[str, int] = {}
    tree = tree_bytes()  # travels beside the folder
    carried: dict[str, list[str]] = {}
    not_carried: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        (scratch / "sdist").mkdir()
        pip_download([f"llama-cpp-python=={llama_pin()}"], scratch / "sdist", binary=False)
        published = next((scratch / "sdist").iterdir())
        sdist = trim_sdist(published, wheels)
        files[f"{WHEELS}/{sdist.name}"] = sdist.stat().st_size
        before, after = published.stat().st_size / 2**20, sdist.stat().st_size / 2**20
        print(f"llama-cpp-python sdist: {before:.1f} MiB -> {after:.1f} MiB")
        for group in GROUPS:
            try:
                found = group_files(group, scratch)
            except subprocess.CalledProcessError as error:
                not_carried[group.name] = f"pip download failed ({error.returncode})"
                continue
            new = [path for path in found if f"{WHEELS}/{path.name}" not in files]
            size = sum(path.stat().st_size for path in new)
            left = CAP_BYTES - MARGIN - tree - sum(files.values())
            if size > left:
                not_carried[group.name] = f"{size / 2**20:.1f} MiB of wheels, {max(0, left) / 2**20:.1f} MiB left"
                continue
            for path in new:
                shutil.copy2(path, wheels / path.name)
                files[f"{WHEELS}/{path.name}"] = path.stat().st_size
            carried[group.name] = sorted(path.name for path in found)
            print(f"{group.name}: {len(found)} wheels, {size / 2**20:.1f} MiB new")
    manifest = {
        "digest": groups_digest(),
        "made_unix": int(time.time()),
        "sdist": f"{WHEELS}/{sdist.name}",
        "files": files,
        "carried": carried,
        "not_carried": not_carried,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    total = sum(files.values())
    mib = 2**20
    print(f"{folder}: {total / mib:.1f} MiB; with the working tree {(total + tree) / mib:.1f} of {CAP_BYTES / mib:.0f}")
    for name, why in not_carried.items():
        print(f"not carried: {name} ({why})")
    return manifest
