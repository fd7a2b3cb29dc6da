"""An upload met by a full disk is a 507 insufficient_storage, as for the server's other stores, never a 500."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypnos.errors import HypnosError
from hypnos_server.batches.files_store import FileStore


def test_an_upload_on_a_full_disk_is_507_and_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, max_bytes=1 << 20, quota_bytes=1 << 20)
    real_fdopen = os.fdopen

    def full_disk(fd: int, *args: object, **kwargs: object) -> object:
        handle = real_fdopen(fd, *args, **kwargs)  # type: ignore[call-overload]

        def no_room(data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        handle.write = no_room
        return handle

    monkeypatch.setattr(os, "fdopen", full_disk)
    with pytest.raises(HypnosError) as caught:
        store.create("alice", "lines.jsonl", "batch", b'{"custom_id": "a"}\n')
    monkeypatch.undo()
    assert (caught.value.status, caught.value.type) == (507, "insufficient_storage")
    assert store.list("alice") == []
    assert not [path for path in tmp_path.rglob("*") if path.is_file()]  # no temp file left behind
