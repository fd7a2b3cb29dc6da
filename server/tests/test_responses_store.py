"""The stored-responses database: what goes with a response (its pending mark, its replayable events) goes when the
response goes, and a database of the first schema opens with its rows kept."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import msgspec
from hypnos_server.responses_store import FILE_NAME, ResponseStore, StoredResponse

OLD_SCHEMA = """
CREATE TABLE responses (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, created_at REAL NOT NULL,
    response BLOB NOT NULL, input_items BLOB NOT NULL, conversation BLOB NOT NULL
);
CREATE INDEX responses_created ON responses (created_at);
CREATE TABLE pending (id TEXT PRIMARY KEY);
CREATE TABLE events (id TEXT PRIMARY KEY, events BLOB NOT NULL);
"""


def stored(response_id: str, created_at: float | None = None, owner: str = "alice") -> StoredResponse:
    """A stored response with one input item."""
    return StoredResponse(
        id=response_id,
        owner=owner,
        created_at=time.time() if created_at is None else created_at,
        response={"id": response_id, "status": "completed"},
        input_items=[{"type": "message", "role": "user", "content": "hi"}],
        conversation=[],
    )


def test_a_deleted_response_takes_its_events_and_pending_mark_along(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, max_count=10, max_age_secs=3600)
    store.put(stored("resp_a"), pending=True)
    store.put_events("resp_a", [b"event: one\n\n"])
    store.put(stored("resp_a"))  # finished: an update keeps the events a GET ?stream=true replays
    assert store.events("resp_a", "alice") == [b"event: one\n\n"]
    assert store.delete("resp_a", "alice")
    store.put(stored("resp_a"))  # the same id stored again starts with no events of the deleted one
    assert store.events("resp_a", "alice") is None
    store.close()


def test_the_count_bound_drops_the_events_of_what_it_drops(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path, max_count=1, max_age_secs=3600)
    store.put(stored("resp_old", created_at=time.time() - 10))
    store.put_events("resp_old", [b"event: old\n\n"])
    store.put(stored("resp_new"))
    assert store.get("resp_old", "alice") is None
    rows = sqlite3.connect(tmp_path / FILE_NAME).execute("SELECT id FROM events").fetchall()
    assert rows == []
    store.close()


def test_a_first_schema_database_opens_with_its_rows_and_a_restart_fails_what_was_pending(tmp_path: Path) -> None:
    old = sqlite3.connect(tmp_path / FILE_NAME)
    old.executescript(OLD_SCHEMA)
    for response_id in ("resp_done", "resp_running"):
        row = stored(response_id)
        old.execute(
            "INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?)",
            (row.id, row.owner, row.created_at, msgspec.json.encode(row.response), b"[]", b"[]"),
        )
    old.execute("INSERT INTO pending VALUES ('resp_running')")
    old.execute("INSERT INTO events VALUES ('resp_done', ?)", (msgspec.json.encode(["event: kept\n\n"]),))
    old.execute("INSERT INTO events VALUES ('resp_gone', ?)", (msgspec.json.encode(["event: orphan\n\n"]),))
    old.commit()
    old.close()
    store = ResponseStore(tmp_path, max_count=10, max_age_secs=3600)
    assert store.events("resp_done", "alice") == [b"event: kept\n\n"]
    running = store.get("resp_running", "alice")
    assert running is not None and running.response["status"] == "failed"
    assert store.delete("resp_done", "alice")
    store.close()
    check = sqlite3.connect(tmp_path / FILE_NAME)
    assert check.execute("SELECT id FROM events").fetchall() == []  # the orphan was not copied, the kept one went
    assert check.execute("PRAGMA user_version").fetchone()[0] >= 1


def test_a_stopping_server_closes_the_database_whole(tmp_path: Path) -> None:
    from hypnos.config import settings_from_mapping
    from hypnos.testing import fake_plugin
    from hypnos_server.app import create_app
    from hypnos_server.plugin_loading import server_plugin_manager
    from litestar.testing import TestClient

    models = [{"id": "fake-chat", "modality": "text_generation", "engine": "fake"}]
    settings = settings_from_mapping({"server": {"data_dir": str(tmp_path)}, "models": models})
    wal = tmp_path / f"{FILE_NAME}-wal"
    with TestClient(create_app(settings, server_plugin_manager(autoload=False, plugins=[fake_plugin]))) as client:
        assert client.get("/v1/models").status_code == 200
        assert wal.exists()  # the store is open, in WAL mode
    assert not wal.exists()  # closed at the stop: its last changes checkpointed into the database file
