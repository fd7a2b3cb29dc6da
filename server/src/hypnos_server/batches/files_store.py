"""Uploaded files (/v1/files): one folder per API key under the data dir, each file written atomically beside a small
JSON of its metadata; a size cap per file and a quota per key."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
from hypnos.errors import HypnosError, clip, not_found
from hypnos.overlay import atomic_write

from hypnos_server.storage import writing

FOLDER = "files"
PURPOSES = ("batch", "batch_output")


class StoredFile(msgspec.Struct, kw_only=True):
    """One file's metadata, as OpenAI's File object shows it (plus its owner, never shown)."""

    id: str
    owner: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    created_ns: int = 0  # orders files stored within one second

    def wire(self) -> dict[str, Any]:
        """The File object."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


def new_file_id() -> str:
    """A fresh `file-<24 hex>` id."""
    return "file-" + secrets.token_hex(12)


def owner_folder(root: Path, owner: str) -> Path:
    """The folder of one key's data (named by a digest of the key's label, so any label is a safe name)."""
    return root / hashlib.sha256(owner.encode()).hexdigest()[:24]


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file, fsynced and renamed (a reader sees all of it or nothing); a
    full disk is a 507 insufficient_storage, as for the server's other stores."""
    with writing(f"the file {path.name}"):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)


def quota_exceeded(quota: int, used: int, size: int) -> HypnosError:
    """413 when one key's files would hold more than server.files_quota_bytes."""
    return HypnosError(
        413,
        "payload_too_large",
        f"This key's files hold {used} bytes; {size} more would pass server.files_quota_bytes ({quota}); delete some",
    )


class FileStore:
    """The files of every key; thread-safe (call it off the event loop). Without a data dir it keeps them in a
    temporary folder removed at close()."""

    def __init__(self, data_path: Path | None, max_bytes: int, quota_bytes: int) -> None:
        self._temporary = data_path is None
        base = Path(tempfile.mkdtemp(prefix="hypnos-files-")) if data_path is None else data_path
        self.root = base / FOLDER if data_path is not None else base
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.quota_bytes = quota_bytes
        self._lock = threading.Lock()

    def _paths(self, owner: str, file_id: str) -> tuple[Path, Path]:
        folder = owner_folder(self.root, owner)
        return folder / f"{file_id}.data", folder / f"{file_id}.json"

    def used(self, owner: str) -> int:
        """The bytes this key's files hold."""
        return sum(stored.bytes for stored in self.list(owner))

    def create(self, owner: str, filename: str, purpose: str, data: bytes) -> StoredFile:
        """Store an upload (413 past the size cap or the key's quota)."""
        if len(data) > self.max_bytes:
            raise too_large(len(data), self.max_bytes)
        with self._lock:
            used = self.used(owner)
            if used + len(data) > self.quota_bytes:
                raise quota_exceeded(self.quota_bytes, used, len(data))
            stored = StoredFile(
                id=new_file_id(),
                owner=owner,
                bytes=len(data),
                created_at=int(time.time()),
                filename=filename,
                purpose=purpose,
                created_ns=time.time_ns(),
            )
            content, meta = self._paths(owner, stored.id)
            write_atomically(content, data)
            write_atomically(meta, msgspec.json.encode(stored))
        return stored

    def adopt(self, owner: str, file_id: str, filename: str, source: Path) -> StoredFile | None:
        """Take a finished file the server wrote (a batch's output) into the store as `file_id` by renaming it (no
        quota check: the key asked for it); idempotent: a file already taken is returned as it is (None: neither)."""
        with self._lock:
            content, meta = self._paths(owner, file_id)
            if meta.is_file():
                return msgspec.json.decode(meta.read_bytes(), type=StoredFile)
            if not source.is_file():
                return None
            stored = StoredFile(
                id=file_id,
                owner=owner,
                bytes=source.stat().st_size,
                created_at=int(time.time()),
                filename=filename,
                purpose="batch_output",
                created_ns=time.time_ns(),
            )
            content.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, content)
            write_atomically(meta, msgspec.json.encode(stored))
        return stored

    def get(self, owner: str, file_id: str) -> StoredFile:
        """This key's file (404 for an unknown id or another key's)."""
        _, meta = self._paths(owner, file_id)
        if not _safe_id(file_id) or not meta.is_file():
            raise unknown_file(file_id)
        return msgspec.json.decode(meta.read_bytes(), type=StoredFile)

    def content_path(self, owner: str, file_id: str) -> Path:
        """Where this key's file's bytes are (404 as get())."""
        self.get(owner, file_id)
        return self._paths(owner, file_id)[0]

    def list(self, owner: str) -> list[StoredFile]:
        """This key's files, oldest first."""
        folder = owner_folder(self.root, owner)
        if not folder.is_dir():
            return []
        found = []
        for meta in folder.glob("file-*.json"):
            try:
                found.append(msgspec.json.decode(meta.read_bytes(), type=StoredFile))
            except (OSError, msgspec.DecodeError, msgspec.ValidationError):
                continue  # deleted meanwhile, or a torn file from before a crash
        return sorted(found, key=lambda stored: (stored.created_at, stored.created_ns, stored.id))

    def delete(self, owner: str, file_id: str) -> None:
        """Remove this key's file (404 as get())."""
        with self._lock:
            self.get(owner, file_id)
            content, meta = self._paths(owner, file_id)
            meta.unlink(missing_ok=True)
            content.unlink(missing_ok=True)

    def close(self) -> None:
        """Remove the temporary folder of a store without a data dir."""
        if self._temporary:
            shutil.rmtree(self.root, ignore_errors=True)


def _safe_id(file_id: str) -> bool:
    return file_id.startswith("file-") and file_id[5:].isalnum()


def unknown_file(file_id: str) -> HypnosError:
    """404 for a file this key does not have."""
    return not_found(f"No file `{clip(file_id)}` (unknown, deleted or another key's)")


def too_large(size: int, cap: int) -> HypnosError:
    """413 for an upload past server.files_max_bytes."""
    return HypnosError(413, "payload_too_large", f"The file holds {size} bytes, above server.files_max_bytes ({cap})")
