"""The prompt cache's disk tier files: written atomically (temp file, fsync, rename), checksummed, and read back
only when their magic, lengths and checksum hold (a torn, truncated or foreign file is refused).

A file: MAGIC, then the header's and the state's lengths (8 bytes each, big-endian), the header (JSON: model,
namespace, tokens, hashes, files), the state, and the SHA-256 of everything before it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

MAGIC = b"HYPNOSPC\x00\x01"  # name and format version
SUFFIX = ".hpc"
_LENGTHS = 16
_DIGEST = 32


class CacheFileError(Exception):
    """A cache file that must not be loaded (torn, truncated, foreign, or failing its checksum)."""


@dataclass
class FileHeader:
    """What a cache file says about its state."""

    model: str
    namespace: str
    tokens: list[int]
    hashes: list[str]
    files: list[str]
    state_len: int


def model_folder(root: Path, model_id: str) -> Path:
    """The folder of one model's files: its id made safe for a file name, plus a hash against collisions."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", model_id)[:64]
    return root / f"{safe}-{hashlib.blake2b(model_id.encode(), digest_size=4).hexdigest()}"


def write_entry(path: Path, header: FileHeader, state: bytes | bytearray) -> int:
    """Write a cache file atomically (temp file in the same folder, fsync, rename); its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps(header.__dict__, separators=(",", ":")).encode()
    prefix = MAGIC + len(head).to_bytes(8, "big") + len(state).to_bytes(8, "big") + head
    digest = hashlib.sha256(prefix)
    digest.update(state)
    descriptor, temp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(prefix)
            handle.write(state)
            handle.write(digest.digest())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return len(prefix) + len(state) + _DIGEST


def read_header(path: Path) -> FileHeader:
    """The header of a cache file whose length matches what it declares (the checksum is checked on read_state)."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        start = handle.read(len(MAGIC) + _LENGTHS)
        if len(start) < len(MAGIC) + _LENGTHS or not start.startswith(MAGIC):
            raise CacheFileError("not a Hypnos prompt cache file (magic)")
        head_len = int.from_bytes(start[len(MAGIC) : len(MAGIC) + 8], "big")
        state_len = int.from_bytes(start[len(MAGIC) + 8 :], "big")
        if size != len(start) + head_len + state_len + _DIGEST:
            raise CacheFileError(f"{size} bytes where the file declares {len(start) + head_len + state_len + _DIGEST}")
        try:
            fields = json.loads(handle.read(head_len))
            header = FileHeader(**fields)
        except (ValueError, TypeError) as error:
            raise CacheFileError(f"unreadable header: {error}") from error
    if header.state_len != state_len:
        raise CacheFileError("the header's state length differs from the file's")
    return header


def read_state(path: Path, model_id: str, namespace: str) -> bytes:
    """The state of a cache file after its lengths, its checksum and its model and namespace were checked."""
    data = path.read_bytes()
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if len(data) < len(MAGIC) + _LENGTHS + _DIGEST or not data.startswith(MAGIC):
        raise CacheFileError("not a Hypnos prompt cache file (magic)")
    head_len = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 8], "big")
    state_len = int.from_bytes(data[len(MAGIC) + 8 : len(MAGIC) + _LENGTHS], "big")
    if len(data) != len(MAGIC) + _LENGTHS + head_len + state_len + _DIGEST:
        raise CacheFileError(f"{len(data)} bytes where the file declares more or fewer (truncated or torn)")
    if hashlib.sha256(body).digest() != digest:
        raise CacheFileError("the checksum does not match (torn or altered)")
    start = len(MAGIC) + _LENGTHS
    try:
        fields = json.loads(data[start : start + head_len])
    except ValueError as error:
        raise CacheFileError(f"unreadable header: {error}") from error
    if fields.get("model") != model_id or fields.get("namespace") != namespace:
        raise CacheFileError("the file belongs to another model or context layout (foreign)")
    return data[start + head_len :][:state_len]


def drop_file(path: Path, why: str) -> None:
    """Remove a cache file that must not be loaded, with a log line saying why."""
    logger.warning("dropping prompt cache file %s: %s", path, why)
    path.unlink(missing_ok=True)


def saved_files(folder: Path, trusted: Callable[[list[str]], bool]) -> Iterator[tuple[Path, FileHeader]]:
    """The files a previous run left that can be indexed: stale temp files, torn ones and those whose model files
    are no longer `trusted` dropped (with a log line)."""
    if not folder.is_dir():
        return
    for path in sorted(folder.glob(f"*/*{SUFFIX}")):
        if path.name.startswith(".tmp-"):
            path.unlink(missing_ok=True)  # a write that never reached its rename
            continue
        try:
            header = read_header(path)
        except (OSError, CacheFileError) as error:
            drop_file(path, str(error))
            continue
        if not header.hashes or not trusted(header.files):
            drop_file(path, "its model file changed since it was saved")
            continue
        yield path, header
