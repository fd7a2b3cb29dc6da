"""Stored conversations (/v1/conversations and the Responses `conversation` field): in the stored responses' SQLite
file, per API key, bounded like the responses (count and bytes per key, age counted from a conversation's last
change); a conversation that would outgrow the key's bytes alone is refused (400)."""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from typing import Any

import anyio
import msgspec
from hypnos.errors import invalid_request

from hypnos_server.storage import over_bounds, rollback, writing

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    metadata BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_updated ON conversations (updated_at);
CREATE TABLE IF NOT EXISTS conversation_items (
    conversation TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    id TEXT NOT NULL,
    item BLOB NOT NULL,
    PRIMARY KEY (conversation, position)
);
CREATE INDEX IF NOT EXISTS conversation_items_id ON conversation_items (conversation, id);
CREATE INDEX IF NOT EXISTS conversations_owner ON conversations (owner, updated_at);
"""
# One conversation's stored bytes: its metadata and its items.
CONVERSATION_BYTES = (
    "length(metadata) + COALESCE((SELECT SUM(length(item)) FROM conversation_items i "
    "WHERE i.conversation = conversations.id), 0)"
)
BEYOND_BOUNDS = over_bounds("conversations", CONVERSATION_BYTES, "updated_at")


class StoredConversation(msgspec.Struct, kw_only=True):
    """One stored conversation: its id, owner, times and metadata (its items are read apart)."""

    id: str
    owner: str
    created_at: float
    updated_at: float
    metadata: dict[str, str]

    def wire(self) -> dict[str, Any]:
        """The OpenAI Conversation object."""
        return {"id": self.id, "object": "conversation", "created_at": int(self.created_at), "metadata": self.metadata}


class ConversationStore:
    """The conversations of one server, on the stored responses' connection (its lock guards every call)."""

    def __init__(
        self, db: sqlite3.Connection, lock: threading.Lock, max_count: int, max_age_secs: int, max_bytes: int
    ) -> None:
        self._db, self._lock = db, lock
        self.max_count, self.max_age_secs, self.max_bytes = max_count, max_age_secs, max_bytes
        with lock:
            try:
                db.executescript(SCHEMA)
            except sqlite3.OperationalError:  # a new index on a full disk: the tables are there, serve on
                if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'conversation_items'").fetchone():
                    raise

    def _bound(self, owner: str, conversation: str) -> None:
        """Drop what is past the age, then the owner's oldest beyond its count and bytes; refuse (400) a
        conversation that alone outgrows the owner's bytes."""
        db = self._db
        size = db.execute(f"SELECT {CONVERSATION_BYTES} FROM conversations WHERE id = ?", (conversation,)).fetchone()
        if size is not None and size[0] > self.max_bytes:
            raise invalid_request(
                f"the conversation would hold {size[0]} bytes, more than a key may store "
                f"(server.responses_max_bytes = {self.max_bytes}); start a new conversation"
            )
        db.execute("DELETE FROM conversations WHERE updated_at < ?", (time.time() - self.max_age_secs,))
        db.execute(f"DELETE FROM conversations WHERE id IN ({BEYOND_BOUNDS})", (owner, self.max_count, self.max_bytes))

    def _transaction(self, work: Any) -> Any:
        with self._lock, writing("the conversation"):
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                result = work(db)
                db.execute("COMMIT")
                return result
            except BaseException:
                rollback(db)
                raise

    def create(self, owner: str, metadata: dict[str, str], items: list[dict[str, Any]]) -> StoredConversation:
        """A new conversation holding `items` (in order)."""
        now = time.time()
        conversation = StoredConversation(
            id=f"conv_{secrets.token_hex(24)}", owner=owner, created_at=now, updated_at=now, metadata=metadata
        )

        def work(db: sqlite3.Connection) -> StoredConversation:
            db.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
                (conversation.id, owner, now, now, msgspec.json.encode(metadata)),
            )
            self._append(db, conversation.id, items)
            self._bound(owner, conversation.id)
            return conversation

        return self._transaction(work)

    def _append(self, db: sqlite3.Connection, conversation: str, items: list[dict[str, Any]]) -> None:
        row = db.execute(
            "SELECT COALESCE(MAX(position), -1) FROM conversation_items WHERE conversation = ?", (conversation,)
        ).fetchone()
        start = row[0] + 1
        db.executemany(
            "INSERT INTO conversation_items VALUES (?, ?, ?, ?)",
            [(conversation, start + i, item["id"], msgspec.json.encode(item)) for i, item in enumerate(items)],
        )
        db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (time.time(), conversation))

    def get(self, conversation_id: str, owner: str) -> StoredConversation | None:
        """This owner's conversation (None: unknown, expired, deleted or another owner's)."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, owner, created_at, updated_at, metadata FROM conversations "
                "WHERE id = ? AND owner = ? AND updated_at >= ?",
                (conversation_id, owner, time.time() - self.max_age_secs),
            ).fetchone()
        if row is None:
            return None
        return StoredConversation(
            id=row[0], owner=row[1], created_at=row[2], updated_at=row[3], metadata=msgspec.json.decode(row[4])
        )

    def update(self, conversation_id: str, owner: str, metadata: dict[str, str]) -> bool:
        """Replace a conversation's metadata; False when there is no such conversation."""

        def work(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE conversations SET metadata = ?, updated_at = ? WHERE id = ? AND owner = ?",
                (msgspec.json.encode(metadata), time.time(), conversation_id, owner),
            )
            return cursor.rowcount > 0

        return self._transaction(work)

    def delete(self, conversation_id: str, owner: str) -> bool:
        """Remove a conversation and its items; False when there was none."""
        with self._lock, writing("the deletion"):
            cursor = self._db.execute("DELETE FROM conversations WHERE id = ? AND owner = ?", (conversation_id, owner))
        return cursor.rowcount > 0

    def items(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every item of a conversation, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT item FROM conversation_items WHERE conversation = ? ORDER BY position", (conversation_id,)
            ).fetchall()
        return [msgspec.json.decode(row[0]) for row in rows]

    def append(self, conversation_id: str, owner: str, items: list[dict[str, Any]]) -> bool:
        """Add items at the end of this owner's conversation; False when there is no such conversation."""

        def work(db: sqlite3.Connection) -> bool:
            found = db.execute(
                "SELECT 1 FROM conversations WHERE id = ? AND owner = ?", (conversation_id, owner)
            ).fetchone()
            if found is None:
                return False
            self._append(db, conversation_id, items)
            self._bound(owner, conversation_id)
            return True

        return self._transaction(work)

    def delete_item(self, conversation_id: str, item_id: str) -> bool:
        """Remove one item of a conversation; False when it has no such item."""
        with self._lock, writing("the deletion"):
            cursor = self._db.execute(
                "DELETE FROM conversation_items WHERE conversation = ? AND id = ?", (conversation_id, item_id)
            )
        return cursor.rowcount > 0

    async def arun(self, method: Any, *args: Any) -> Any:
        """One of these methods off the event loop."""
        return await anyio.to_thread.run_sync(method, *args)
