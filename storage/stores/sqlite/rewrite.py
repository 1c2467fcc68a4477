"""Writes of the SQLite store that remove messages: replace, delete, delete a user.

Each is one write transaction. One that fails on a damaged search index (its rows are
removed with the messages) drops the index, which is rebuilt from the messages, and runs
again (:func:`index_repaired`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from storage.message import ChatKey, ChatMessage
from storage.stores.base import conflict
from storage.stores.sqlite import checkpoints, fts, tallies
from storage.stores.sqlite.tallies import KEY
from storage.stores.sqlite.writes import append, remove, transaction

__all__ = ["delete_key", "delete_user", "index_repaired", "replace"]

R = TypeVar("R")
Unusable = Callable[[str, object, object], None]  # (what, where, detail): count and log it


def index_repaired(conn: sqlite3.Connection, work: Callable[[], R], unusable: Unusable) -> R:
    """Run ``work`` (a write or a search); when it fails on a damaged search index, drop the
    index (reported through ``unusable``; the messages rebuild it) and run it again."""
    try:
        return work()
    except sqlite3.DatabaseError as exc:
        if not fts.corruption(exc) or conn.in_transaction or not fts.broken(conn):
            raise
        unusable("search index", "the database", exc)
        with transaction(conn):
            fts.reset(conn)
        return work()


def replace(
    conn: sqlite3.Connection,
    key: ChatKey,
    batch: list[ChatMessage],
    expected_version: str | None,
    unusable: Unusable,
) -> tuple[list[int], list[ChatMessage]]:
    """Replace the key's messages in one transaction (a new epoch, the checkpoint, its
    versions and the rewinds dropped, records kept), only while its version is
    ``expected_version`` when given; the removed sequence numbers and the messages stored.

    Raises:
        ConflictError: the key's version is not ``expected_version`` (nothing changed).
    """
    params = (key.user_id, key.session_id, key.agent_id)

    def work() -> tuple[list[int], list[ChatMessage]]:
        with transaction(conn):
            if expected_version is not None:
                version = checkpoints.head_for_write(conn, key, unusable).version
                if version != expected_version:
                    raise conflict(key, expected_version, version)
            # Not an erasure: the search index is merged by later deletes, not here.
            seqs = remove(conn, KEY, params, erase=False)
            conn.execute(f"DELETE FROM conversations WHERE {KEY}", params)
            conn.execute(f"DELETE FROM checkpoints WHERE {KEY}", params)
            conn.execute(f"DELETE FROM checkpoint_versions WHERE {KEY}", params)
            conn.execute(f"DELETE FROM rewinds WHERE {KEY}", params)
            conn.execute(f"DELETE FROM rewound WHERE {KEY}", params)
            stored: list[ChatMessage] = []
            if batch:
                stored, _ = append(conn, key, batch)
            tallies.refresh_sessions(conn, [(key.user_id, key.session_id)])
        return seqs, stored

    return index_repaired(conn, work, unusable)


def delete_key(conn: sqlite3.Connection, key: ChatKey, unusable: Unusable) -> list[int]:
    """Erase one conversation (messages, tallies, checkpoint, lease, records); the removed
    sequence numbers."""
    params = (key.user_id, key.session_id, key.agent_id)

    def work() -> list[int]:
        with transaction(conn):
            seqs = remove(conn, KEY, params)
            for table in (
                "conversations",
                "checkpoints",
                "checkpoint_versions",
                "leases",
                "records",
                "rewinds",
                "rewound",
            ):
                conn.execute(f"DELETE FROM {table} WHERE {KEY}", params)
            tallies.refresh_sessions(conn, [(key.user_id, key.session_id)])
        return seqs

    return index_repaired(conn, work, unusable)


def delete_user(conn: sqlite3.Connection, user_id: str, unusable: Unusable) -> list[int]:
    """Erase every conversation of the user; the removed sequence numbers."""

    def work() -> list[int]:
        with transaction(conn):
            seqs = remove(conn, "user_id = ?", (user_id,))
            for table in (
                "conversations",
                "sessions",
                "checkpoints",
                "checkpoint_versions",
                "leases",
                "records",
                "rewinds",
                "rewound",
            ):
                conn.execute(f"DELETE FROM {table} WHERE user_id = ?", (user_id,))
        return seqs

    return index_repaired(conn, work, unusable)
