"""Stored /v1/responses: one SQLite file (WAL) under the data dir, per API key, bounded by count and age."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec

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
"""


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

    def __init__(self, folder: Path | None, max_count: int, max_age_secs: int) -> None:
        self.max_count = max_count
        self.max_age_secs = max_age_secs
        self.path = None if folder is None else folder / FILE_NAME
        self._lock = threading.Lock()
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        """Open (or create) the database; a file that is not a sound database is moved aside and a new one made."""
        if self.path is None:
            return self._connect(":memory:")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = self._connect(str(self.path))
            row = db.execute("PRAGMA quick_check").fetchone()
            if row is None or row[0] != "ok":
                db.close()
                raise sqlite3.DatabaseError(f"quick_check: {row[0] if row else 'no answer'}")
            return db
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
        db.executescript(SCHEMA)
        return db

    def put(self, stored: StoredResponse) -> None:
        """Insert or replace a response in one transaction, dropping what is beyond the count and age bounds."""
        row = (
            stored.id,
            stored.owner,
            stored.created_at,
            msgspec.json.encode(stored.response),
            msgspec.json.encode(stored.input_items),
            msgspec.json.encode(stored.conversation),
        )
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", row)
                db.execute("DELETE FROM responses WHERE created_at < ?", (time.time() - self.max_age_secs,))
                db.execute(
                    "DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY created_at DESC LIMIT -1 "
                    "OFFSET ?)",
                    (self.max_count,),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def get(self, response_id: str, owner: str) -> StoredResponse | None:
        """The response with this id stored by this owner (None for another owner's, an expired or unknown one)."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, owner, created_at, response, input_items, conversation FROM responses "
                "WHERE id = ? AND owner = ? AND created_at >= ?",
                (response_id, owner, time.time() - self.max_age_secs),
            ).fetchone()
        if row is None:
            return None
        return StoredResponse(
            id=row[0],
            owner=row[1],
            created_at=row[2],
            response=msgspec.json.decode(row[3]),
            input_items=msgspec.json.decode(row[4]),
            conversation=msgspec.json.decode(row[5]),
        )

    def delete(self, response_id: str, owner: str) -> bool:
        """Remove this owner's response; False when there was none."""
        with self._lock:
            cursor = self._db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner))
        return cursor.rowcount > 0

    async def aput(self, stored: StoredResponse) -> None:
        """put() off the event loop."""
        await anyio.to_thread.run_sync(self.put, stored)

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
