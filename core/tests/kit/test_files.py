"""Starter joins (order, sha256, atomic, idempotent), package files, and warm pages."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypnos.kit.starter import copy_verified, file_sha256, join_parts, package_file
from hypnos.kit.warm_pages import WarmPages


def _parts(tmp_path: Path) -> list[Path]:
    parts = []
    for index, content in enumerate([b"alpha-", b"bravo-", b"charlie"]):
        part = tmp_path / f"part{index}"
        part.write_bytes(content)
        parts.append(part)
    return parts


def test_join_in_order_verified_and_idempotent(tmp_path: Path) -> None:
    parts = _parts(tmp_path)
    digest = hashlib.sha256(b"alpha-bravo-charlie").hexdigest()
    dest = join_parts(parts, tmp_path / "out" / "model.bin", digest)
    assert dest.read_bytes() == b"alpha-bravo-charlie" and dest.stat().st_mode & 0o777 == 0o644
    mtime = dest.stat().st_mtime_ns
    parts[0].write_bytes(b"changed")  # a verified file is kept, not rejoined
    join_parts(parts, dest, digest)
    assert dest.stat().st_mtime_ns == mtime


def test_a_verified_file_is_not_read_again_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hypnos.kit.starter as starter

    parts = _parts(tmp_path)
    digest = hashlib.sha256(b"alpha-bravo-charlie").hexdigest()
    dest = join_parts(parts, tmp_path / "out" / "model.bin", digest)
    reads: list[Path] = []
    monkeypatch.setattr(starter, "file_sha256", lambda path: reads.append(path) or file_sha256(path))
    join_parts(parts, dest, digest)
    assert reads == []  # the restart's check costs a stat, not a read of the whole file
    dest.write_bytes(b"alpha-bravo-charliE")  # damaged after it was verified
    join_parts(parts, dest, digest)
    assert reads == [dest] and dest.read_bytes() == b"alpha-bravo-charlie"  # read, found wrong, joined again
    assert [p.name for p in dest.parent.iterdir()] == ["model.bin"]  # the stamp is no file beside it


def test_join_mismatch_leaves_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "out" / "model.bin"
    with pytest.raises(ValueError, match="sha256"):
        join_parts(_parts(tmp_path), dest, "0" * 64)
    assert list(dest.parent.iterdir()) == []


def test_package_file_and_copy_verified(tmp_path: Path) -> None:
    source = package_file("pytest", "pytest/__init__.py")
    assert source.is_file()
    copied = copy_verified("pytest", "pytest/__init__.py", tmp_path / "copy.py")
    assert file_sha256(copied) == file_sha256(source)
    with pytest.raises(FileNotFoundError):
        package_file("pytest", "pytest/no-such-file")
    with pytest.raises(FileNotFoundError):
        package_file("no-such-distribution-here", "x")


def test_warm_pages_hold_and_release(tmp_path: Path) -> None:
    files = _parts(tmp_path)
    pages = WarmPages(files)
    assert pages.bytes_held == 0 and not pages.held
    pages.hold()
    assert pages.held and pages.bytes_held == sum(p.stat().st_size for p in files)
    assert pages.hold() == 0.0  # idempotent
    pages.release()
    assert pages.bytes_held == 0 and not pages.held
    missing = WarmPages([files[0], tmp_path / "gone"])
    with pytest.raises(OSError):
        missing.hold()
    assert not missing.held
