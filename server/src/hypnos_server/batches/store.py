"""Batches on disk: one JSON per batch (rewritten atomically at each status change) and its progress files, to which
each finished line is appended and fsynced, so that a restart resumes where the batch stopped."""

from __future__ import annotations

import builtins
import os
import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import msgspec

from hypnos_server.batches.files_store import owner_folder, write_atomically

FOLDER = "batches"
UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")
OUTPUT, ERRORS, INVALID = "output.jsonl", "errors.jsonl", "invalid.jsonl"
TIMES = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


class BatchRecord(msgspec.Struct, kw_only=True):
    """One batch as stored: OpenAI's Batch object's fields plus its owner (never shown)."""

    id: str
    owner: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None
    model: str | None = None
    # how the batch ends (completed, expired, cancelled), set once its lines are counted, before its files are handed
    # over; a restart then only finishes the hand-over
    ending: str | None = None
    created_ns: int = 0  # orders batches created within one second

    def wire(self) -> dict[str, Any]:
        """The Batch object."""
        shown: dict[str, Any] = {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": None if not self.errors else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
        }
        shown.update({name: getattr(self, name) for name in TIMES})
        shown["request_counts"] = {"total": self.total, "completed": self.completed, "failed": self.failed}
        shown["metadata"] = self.metadata
        return shown

    @property
    def finished(self) -> bool:
        """Whether the batch reached an end (completed, failed, expired or cancelled)."""
        return self.status not in UNFINISHED


def new_batch_id() -> str:
    """A fresh `batch_<24 hex>` id."""
    return "batch_" + secrets.token_hex(12)


def new_line_id() -> str:
    """A fresh `batch_req_<24 hex>` id of one output line."""
    return "batch_req_" + secrets.token_hex(12)


class BatchStore:
    """Every key's batches; thread-safe (call it off the event loop). Without a data dir it keeps them in a
    temporary folder removed at close()."""

    def __init__(self, data_path: Path | None) -> None:
        self._temporary = data_path is None
        self.root = Path(tempfile.mkdtemp(prefix="hypnos-batches-")) if data_path is None else data_path / FOLDER
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def _meta(self, owner: str, batch_id: str) -> Path:
        return owner_folder(self.root, owner) / f"{batch_id}.json"

    def progress(self, record: BatchRecord, kind: str) -> Path:
        """The path of one of a batch's progress files (OUTPUT, ERRORS or INVALID)."""
        return owner_folder(self.root, record.owner) / f"{record.id}.{kind}"

    def save(self, record: BatchRecord) -> None:
        """Write the batch's JSON atomically."""
        write_atomically(self._meta(record.owner, record.id), msgspec.json.encode(record))

    def get(self, owner: str, batch_id: str) -> BatchRecord | None:
        """This key's batch (None for an unknown id or another key's)."""
        if not batch_id.startswith("batch_") or not batch_id[6:].isalnum():
            return None
        path = self._meta(owner, batch_id)
        try:
            return msgspec.json.decode(path.read_bytes(), type=BatchRecord)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None

    def list(self, owner: str | None = None) -> list[BatchRecord]:
        """One key's batches (every key's when `owner` is None), newest first."""
        folders = [owner_folder(self.root, owner)] if owner is not None else list(self.root.iterdir())
        found = []
        for folder in folders:
            if not folder.is_dir():
                continue
            for meta in folder.glob("batch_*.json"):
                try:
                    found.append(msgspec.json.decode(meta.read_bytes(), type=BatchRecord))
                except (OSError, msgspec.DecodeError, msgspec.ValidationError):
                    continue
        return sorted(found, key=lambda record: (record.created_at, record.created_ns, record.id), reverse=True)

    def append(self, path: Path, line: bytes) -> None:
        """Append one finished line and fsync it: once this returns the line survives a kill -9."""
        with self._lock, path.open("ab") as out:
            out.write(line + b"\n")
            out.flush()
            os.fsync(out.fileno())

    def finished_lines(self, path: Path) -> builtins.list[dict[str, Any]]:  # `list` here is the method above
        """The lines a progress file holds (a line torn by a crash is cut off first)."""
        if not path.is_file():
            return []
        data = path.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]
        if len(whole) != len(data):
            with path.open("r+b") as out:
                out.truncate(len(whole))
                os.fsync(out.fileno())
        return [msgspec.json.decode(line) for line in whole.splitlines() if line.strip()]

    def close(self) -> None:
        """Remove the temporary folder of a store without a data dir."""
        if self._temporary:
            shutil.rmtree(self.root, ignore_errors=True)
