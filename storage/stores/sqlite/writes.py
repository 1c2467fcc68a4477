"""Writes of the SQLite store: transactions, appending a batch, removing rows, erasure.

Every write runs in one ``BEGIN IMMEDIATE`` transaction: SQLite lets one writer at a time
hold the database's write lock, and ``AUTOINCREMENT`` numbers rows while it is held, so a
batch's sequence numbers are contiguous and per-key order is commit order (a reader tailing
by sequence never misses a row committed later with a smaller number).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Final

from storage.codec import encode
from storage.errors import StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import fts, tallies
from storage.stores.sqlite.wal import copy_wal, truncate_wal
from storage.stores.times import from_us, to_us

__all__ = [
    "append",
    "from_us",
    "next_seq",
    "remove",
    "to_us",
    "transaction",
    "wipe_wal",
]

_INSERT: Final = (
    "INSERT INTO messages (user_id, session_id, agent_id, message_id, created_us, record) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, session_id, agent_id, message_id) DO NOTHING"
)


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction (the write lock taken at once); rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def append(
    conn: sqlite3.Connection,
    key: ChatKey,
    batch: Sequence[ChatMessage],
    unusable: Callable[[str, object, object], None] | None = None,
) -> tuple[list[ChatMessage], list[int]]:
    """Insert a prepared batch inside a transaction, with its tallies (a tally found missing
    is rebuilt from the messages and reported through ``unusable``).

    Returns:
        The newly stored messages (ids already stored for the key are skipped) and their
        sequence numbers.
    """
    user, session, agent = key.user_id, key.session_id, key.agent_id
    rows = []
    last_at: datetime | None = None
    us = 0
    for m in batch:
        at = m.created_at
        if at is not last_at:  # a batch usually shares one timestamp
            us = to_us(at)  # type: ignore[arg-type]
            last_at = at
        rows.append((user, session, agent, m.id, us, encode(m)))
    stored: list[ChatMessage]
    seqs: list[int]
    if len(rows) == 1:
        cursor = conn.execute(_INSERT, rows[0])
        if not cursor.rowcount:
            return [], []
        stored, seqs = list(batch), [cursor.lastrowid or 0]
        first_us = last_us = rows[0][4]
    else:
        conn.execute("SAVEPOINT batch")
        if conn.executemany(_INSERT, rows).rowcount == len(rows):
            # Numbered consecutively: nobody else can insert while the write lock is held.
            (last,) = conn.execute("SELECT last_insert_rowid()").fetchone()
            stored, seqs = list(batch), list(range(last - len(rows) + 1, last + 1))
            kept = rows
        else:
            # Some ids were stored before (a retried batch): redo row by row to learn which.
            conn.execute("ROLLBACK TO batch")
            stored, seqs, kept = [], [], []
            for m, row in zip(batch, rows, strict=True):
                cursor = conn.execute(_INSERT, row)
                if cursor.rowcount:
                    stored.append(m)
                    seqs.append(cursor.lastrowid or 0)
                    kept.append(row)
        conn.execute("RELEASE batch")
        if not stored:
            return [], []
        first_us = min(row[4] for row in kept)
        last_us = max(row[4] for row in kept)
    if not tallies.add(conn, key, len(stored), first_us, last_us) and unusable is not None:
        unusable("head", key, "a per-key or per-session tally was missing")
    return stored, seqs


def remove(
    conn: sqlite3.Connection, where: str, params: Sequence[object], *, erase: bool = True
) -> list[int]:
    """Delete the messages ``WHERE where`` and their search-index rows (inside a write
    transaction), merging the index when ``erase`` so their words are gone from it; returns
    their sequence numbers, ascending. Tallies are the caller's."""
    seqs = [
        seq
        for (seq,) in conn.execute(f"SELECT seq FROM messages WHERE {where} ORDER BY seq", params)
    ]
    if seqs:
        indexed = seqs[0] <= fts.indexed_to(conn)
        if indexed:
            fts.unindex(conn, where, params)
        conn.execute(f"DELETE FROM messages WHERE {where}", params)
        if indexed and erase:
            fts.erase(conn)
    return seqs


def next_seq(conn: sqlite3.Connection) -> int:
    """Take the next number of the messages' own sequence (inside a transaction), so a record
    is ordered among the messages and no message ever gets its number."""
    row = conn.execute(
        "UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'messages' RETURNING seq"
    ).fetchone()
    if row is not None:
        return int(row[0])
    # Nothing was ever inserted into messages: start the sequence here.
    (top,) = conn.execute(
        "SELECT max(coalesce((SELECT max(seq) FROM messages), 0), "
        "coalesce((SELECT max(seq) FROM records), 0))"
    ).fetchone()
    conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', ?)", (top + 1,))
    return int(top) + 1


def wipe_wal(conn: sqlite3.Connection, where: str, seconds: float) -> None:
    """Copy the write-ahead log into the database and truncate it to zero bytes, so frames
    holding erased rows are gone from ``-wal`` (``secure_delete`` zeroed them in the main
    file), retrying for up to ``seconds`` while other connections keep it busy
    (:func:`~storage.stores.sqlite.wal.truncate_wal`).

    Raises:
        StorageUnavailableError: other connections kept it busy throughout. The rows are
            deleted; the message says where older copies remain: only in ``-wal`` when every
            frame could still be copied into the database (its readers were on the newest
            snapshot), else in the database file too, until the next checkpoint.
    """
    if truncate_wal(conn, seconds):
        return
    left = (
        "the -wal file (not the database file) until it is next reset"
        if copy_wal(conn)
        else "the database file and its -wal until their next checkpoint"
    )
    raise StorageUnavailableError(
        f"{where}: the rows are deleted, but other connections kept the write-ahead log busy "
        f"for {seconds:g} s, so older copies may remain in {left}; call again once they are "
        "idle to finish"
    )
