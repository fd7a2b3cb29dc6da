"""Stored /v1/responses: one SQLite file (WAL) under the data dir, per API key, bounded per key by count and bytes,
and by age. A full disk refuses new responses with 507; a final state it cannot write is kept in memory (reported
as failed) and written when the disk has room again, and the server starts on a full disk."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec

from hypnos_server.conversations_store import ConversationStore
from hypnos_server.storage import StorageFull, disk_failure, over_bounds, rollback, writing

logger = logging.getLogger(__name__)

FILE_NAME = "responses.sqlite3"
SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at REAL NOT NULL,
    response BLOB NOT NULL,
    input_items BLOB NOT NULL,
    conversation BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at);
CREATE INDEX IF NOT EXISTS responses_owner ON responses (owner, created_at);
CREATE TABLE IF NOT EXISTS pending (id TEXT PRIMARY KEY REFERENCES responses (id) ON DELETE CASCADE);
CREATE TABLE IF NOT EXISTS events (
    id TEXT PRIMARY KEY REFERENCES responses (id) ON DELETE CASCADE,
    events BLOB NOT NULL
);
"""
# Version 1: `pending` and `events` go with their response (ON DELETE CASCADE) instead of a scan after each write.
SCHEMA_VERSION = 1
UPSERT = (
    "INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, "
    "created_at = excluded.created_at, response = excluded.response, input_items = excluded.input_items, "
    "conversation = excluded.conversation"
)
# What a background response that was queued or running when the server stopped says after the restart.
INTERRUPTED = {
    "code": "server_error",
    "message": "The server stopped while this background response was being generated; create it again",
}
# One response's stored bytes: its three blobs and its kept events.
RESPONSE_BYTES = (
    "length(response) + length(input_items) + length(conversation) + "
    "COALESCE((SELECT length(events) FROM events e WHERE e.id = responses.id), 0)"
)
BEYOND_BOUNDS = over_bounds("responses", RESPONSE_BYTES, "created_at")


def _migrate(db: sqlite3.Connection) -> None:
    """Bring a database of an older version to SCHEMA_VERSION in one transaction (tables of version 0 had no foreign
    keys: their rows are copied into the new tables, orphans dropped)."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.execute("BEGIN IMMEDIATE")
    try:
        for table in ("pending", "events"):
            if table in tables:
                db.execute(f"ALTER TABLE {table} RENAME TO old_{table}")
        for statement in SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        for table in ("pending", "events"):
            if table in tables:
                db.execute(f"INSERT INTO {table} SELECT * FROM old_{table} WHERE id IN (SELECT id FROM responses)")
                db.execute(f"DROP TABLE old_{table}")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        rollback(db)
        raise


class StoredResponse(msgspec.Struct, kw_only=True):
    """One stored response: its Response object, its own input items, and the whole conversation it ends
    (the items a `previous_response_id` continues from, instructions excluded)."""

    id: str
    owner: str
    created_at: float
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    conversation: list[dict[str, Any]]


class ResponseStore:
    """The stored responses of one server; every call is thread-safe and has an async twin for the event loop."""

    def __init__(
        self,
        folder: Path | None,
        max_count: int,
        max_age_secs: int,
        file_name: str = FILE_NAME,
        max_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        """`max_count` and `max_bytes` bound each key's responses (its oldest go first; its newest always stays);
        `file_name`: the database's file in `folder` (another one keeps Anthropic message threads the same way)."""
        self.max_count, self.max_bytes = max_count, max_bytes
        self.max_age_secs = max_age_secs
        self.path = None if folder is None else folder / file_name
        self._lock = threading.Lock()
        # final states the disk refused, by id: read from here (as failed) and written at the next chance
        self._unwritten: dict[str, StoredResponse] = {}
        self._db = self._open()
        self._fail_interrupted()
        self.conversations = ConversationStore(self._db, self._lock, max_count, max_age_secs, max_bytes)

    def _open(self) -> sqlite3.Connection:
        """Open (or create) the database; a file that is not a sound database is moved aside and a new one made."""
        if self.path is None:
            return self._connect(":memory:")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = self._connect(str(self.path))
            row = db.execute("PRAGMA quick_check").fetchone()
            if row is None or row[0] != "ok":
                db.close()
                raise sqlite3.DatabaseError(f"quick_check: {row[0] if row else 'no answer'}")
            return db
        except (sqlite3.OperationalError, OSError) as error:  # cannot open or write it (a full disk): serve on
            logger.error("the database %s cannot be opened (%s): kept in memory until a restart", self.path, error)
            return self._connect(":memory:")
        except sqlite3.DatabaseError as error:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            logger.error("the stored responses database %s is unreadable (%s); moved to %s", self.path, error, aside)
            for suffix in ("", "-wal", "-shm"):
                part = Path(f"{self.path}{suffix}")
                if part.exists():
                    part.rename(Path(f"{aside}{suffix}"))
            return self._connect(str(self.path))

    def _connect(self, target: str) -> sqlite3.Connection:
        db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # a completed response survives a kill -9 and a power cut
        db.execute("PRAGMA foreign_keys=ON")
        if db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            _migrate(db)
        try:
            db.executescript(SCHEMA)
        except sqlite3.OperationalError as error:  # a new index on a full disk: the tables are there, serve on
            if (
                not disk_failure(error)
                or not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'pending'").fetchone()
            ):
                raise
            logger.error("the stored responses database %s could not be updated (%s)", target, error)
        return db

    def _fail_interrupted(self) -> None:
        """Background responses still pending from the last run (it crashed or was killed) become `failed`; on a full
        disk they are failed in memory and written later."""
        with self._lock:
            db = self._db
            rows = db.execute(
                "SELECT r.id, r.owner, r.created_at, r.response, r.input_items, r.conversation FROM responses r "
                "JOIN pending p ON p.id = r.id"
            ).fetchall()
            failed = [_stored(row) for row in rows]
            for stored in failed:
                stored.response.update(status="failed", error=INTERRUPTED)
            try:
                self._write_all(db, failed)
            except StorageFull as error:
                logger.error("%d interrupted background response(s) stay failed in memory: %s", len(rows), error)
                self._unwritten.update((stored.id, stored) for stored in failed)
                return
        if rows:
            logger.warning("%d background response(s) interrupted by the last shutdown are now failed", len(rows))

    def _write_all(self, db: sqlite3.Connection, final: list[StoredResponse]) -> None:
        """Write final states in one transaction (StorageFull on a full disk; nothing written then)."""
        if not final:
            return
        with writing("the responses"):
            db.execute("BEGIN IMMEDIATE")
            try:
                for stored in final:
                    db.execute(UPSERT, _row(stored))
                    db.execute("DELETE FROM pending WHERE id = ?", (stored.id,))
                db.execute("COMMIT")
            except BaseException:
                rollback(db)
                raise

    def _flush(self, db: sqlite3.Connection) -> None:
        """Write the final states the disk refused before (they stay in memory while it still refuses)."""
        if not self._unwritten:
            return
        try:
            self._write_all(db, list(self._unwritten.values()))
        except StorageFull:
            return
        logger.info("%d response(s) kept in memory while the disk was full are stored now", len(self._unwritten))
        self._unwritten.clear()

    def put(self, stored: StoredResponse, pending: bool = False) -> None:
        """Insert or replace a response in one transaction, dropping what is beyond the count and age bounds;
        `pending`: a background response not finished yet (failed at the next start if it never finishes). The key's
        oldest responses beyond its count or bytes go. A full disk raises StorageFull (507); a final state it refused
        is then kept in memory as failed, read back from there and written once the disk has room."""
        with self._lock:
            db = self._db
            self._flush(db)
            try:
                with writing("the response"):
                    db.execute("BEGIN IMMEDIATE")
                    try:
                        db.execute(UPSERT, _row(stored))  # an update, not a delete and insert: its marks stay
                        if pending:
                            db.execute("INSERT OR IGNORE INTO pending VALUES (?)", (stored.id,))
                        else:
                            db.execute("DELETE FROM pending WHERE id = ?", (stored.id,))
                        db.execute("DELETE FROM responses WHERE created_at < ?", (time.time() - self.max_age_secs,))
                        db.execute(
                            f"DELETE FROM responses WHERE id IN ({BEYOND_BOUNDS})",
                            (stored.owner, self.max_count, self.max_bytes),
                        )
                        db.execute("COMMIT")
                    except BaseException:
                        rollback(db)
                        raise
            except StorageFull as error:
                if not pending:  # the end of a response the disk refused: failed, not left queued
                    self._unwritten[stored.id] = _failed(stored, error)
                raise
            self._unwritten.pop(stored.id, None)

    def get(self, response_id: str, owner: str) -> StoredResponse | None:
        """The response with this id stored by this owner (None for another owner's, an expired or unknown one)."""
        with self._lock:
            kept = self._unwritten.get(response_id)
            if kept is not None:
                return kept if kept.owner == owner else None
            row = self._db.execute(
                "SELECT id, owner, created_at, response, input_items, conversation FROM responses "
                "WHERE id = ? AND owner = ? AND created_at >= ?",
                (response_id, owner, time.time() - self.max_age_secs),
            ).fetchone()
        return None if row is None else _stored(row)

    def put_events(self, response_id: str, events: list[bytes]) -> None:
        """Keep a finished background response's SSE events (a later GET with `stream` replays them)."""
        blob = msgspec.json.encode([event.decode() for event in events])
        with self._lock, writing("the response's events"):
            self._db.execute(
                "INSERT OR REPLACE INTO events SELECT id, ? FROM responses WHERE id = ?", (blob, response_id)
            )

    def events(self, response_id: str, owner: str) -> list[bytes] | None:
        """This owner's kept events of a background response (None: none kept)."""
        with self._lock:
            row = self._db.execute(
                "SELECT e.events FROM events e JOIN responses r ON r.id = e.id WHERE e.id = ? AND r.owner = ?",
                (response_id, owner),
            ).fetchone()
        return None if row is None else [event.encode() for event in msgspec.json.decode(row[0])]

    async def aput_events(self, response_id: str, events: list[bytes]) -> None:
        """put_events() off the event loop."""
        await anyio.to_thread.run_sync(self.put_events, response_id, events)

    async def aevents(self, response_id: str, owner: str) -> list[bytes] | None:
        """events() off the event loop."""
        return await anyio.to_thread.run_sync(self.events, response_id, owner)

    def delete(self, response_id: str, owner: str) -> bool:
        """Remove this owner's response; False when there was none."""
        with self._lock, writing("the deletion"):
            kept = self._unwritten.get(response_id)
            if kept is not None and kept.owner == owner:
                del self._unwritten[response_id]
            cursor = self._db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner))
        return cursor.rowcount > 0 or (kept is not None and kept.owner == owner)

    async def aput(self, stored: StoredResponse, pending: bool = False) -> None:
        """put() off the event loop."""
        await anyio.to_thread.run_sync(self.put, stored, pending)

    async def aget(self, response_id: str, owner: str) -> StoredResponse | None:
        """get() off the event loop."""
        return await anyio.to_thread.run_sync(self.get, response_id, owner)

    async def adelete(self, response_id: str, owner: str) -> bool:
        """delete() off the event loop."""
        return await anyio.to_thread.run_sync(self.delete, response_id, owner)

    def close(self) -> None:
        """Close the database (at shutdown)."""
        with self._lock:
            self._db.close()


def _row(stored: StoredResponse) -> tuple[Any, ...]:
    return (
        stored.id,
        stored.owner,
        stored.created_at,
        msgspec.json.encode(stored.response),
        msgspec.json.encode(stored.input_items),
        msgspec.json.encode(stored.conversation),
    )


def _stored(row: tuple[Any, ...]) -> StoredResponse:
    return StoredResponse(
        id=row[0],
        owner=row[1],
        created_at=row[2],
        response=msgspec.json.decode(row[3]),
        input_items=msgspec.json.decode(row[4]),
        conversation=msgspec.json.decode(row[5]),
    )


def _failed(stored: StoredResponse, error: StorageFull) -> StoredResponse:
    """What a response the disk refused reads back as: failed, naming the full disk (its output not kept)."""
    response = {**stored.response, "status": "failed", "output": []}
    response["error"] = {"code": error.type, "message": error.message}
    return StoredResponse(
        id=stored.id,
        owner=stored.owner,
        created_at=stored.created_at,
        response=response,
        input_items=[],
        conversation=[],
    )
