"""What the server's own stores (stored responses, threads, conversations, usage) share: a full disk is a 507 with
the spec's error body, never a 500, and a window query that keeps each key within its count and bytes."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from hypnos.errors import HypnosError


class StorageFull(HypnosError):
    """507 insufficient_storage: the server's disk is full (or failing), so nothing was stored; retry later."""

    def __init__(self, what: str, cause: BaseException | str) -> None:
        super().__init__(
            507,
            "insufficient_storage",
            f"The server could not store {what}: its disk is full or failing ({cause}); retry later",
        )


def disk_failure(error: BaseException) -> bool:
    """True for SQLite's and the OS's full-disk and write failures (not for a bad statement or a locked file)."""
    if isinstance(error, sqlite3.OperationalError):
        text = str(error).lower()
        return "full" in text or "disk i/o" in text or "readonly" in text or "read-only" in text
    return isinstance(error, OSError) and error.errno in (28, 5, 30, 122)  # ENOSPC, EIO, EROFS, EDQUOT


@contextmanager
def writing(what: str) -> Iterator[None]:
    """Map a full disk met while writing `what` to StorageFull (507)."""
    try:
        yield
    except (sqlite3.OperationalError, OSError) as error:
        if disk_failure(error):
            raise StorageFull(what, error) from error
        raise


def rollback(db: sqlite3.Connection) -> None:
    """Roll back the open transaction (SQLite has already ended it after a full disk)."""
    if db.in_transaction:
        db.execute("ROLLBACK")


def over_bounds(table: str, size: str, order: str) -> str:
    """SQL selecting the ids of one owner's rows of `table` beyond its newest `?` rows or `?` bytes (`size` per row,
    newest by `order`); the newest row always stays. Parameters: owner, max count, max bytes."""
    return (
        f"SELECT id FROM (SELECT id, ROW_NUMBER() OVER w AS n, SUM({size}) OVER w AS running FROM {table} "
        f"WHERE owner = ? WINDOW w AS (ORDER BY {order} DESC, id ROWS UNBOUNDED PRECEDING)) "
        "WHERE n > 1 AND (n > ? OR running > ?)"
    )
