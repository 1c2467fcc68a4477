"""Per-key and per-session tallies (``conversations``, ``sessions``), kept in the transaction
of every write and delete, so heads and session listings never scan messages.

A key has a ``conversations`` row exactly while it holds messages; the row's ``epoch`` is new
each time the key starts holding messages again or loses some (delete, replace, purge).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from typing import Final

from storage.message import ChatKey

__all__ = ["KEY", "add", "new_epoch", "refresh_keys", "refresh_sessions"]

KEY: Final = "user_id = ? AND session_id = ? AND agent_id = ?"

_ADD_KEY: Final = (
    "INSERT INTO conversations (user_id, session_id, agent_id, epoch, message_count, first_us, "
    "last_us) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (user_id, session_id, agent_id) DO UPDATE "
    "SET message_count = message_count + excluded.message_count, "
    "first_us = min(first_us, excluded.first_us), last_us = max(last_us, excluded.last_us)"
)
_ADD_SESSION: Final = (
    "INSERT INTO sessions (user_id, session_id, message_count, first_us, last_us) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (user_id, session_id) DO UPDATE "
    "SET message_count = message_count + excluded.message_count, "
    "first_us = min(first_us, excluded.first_us), last_us = max(last_us, excluded.last_us)"
)


def new_epoch() -> str:
    """A fresh epoch name (16 hex digits)."""
    return os.urandom(8).hex()


def add(conn: sqlite3.Connection, key: ChatKey, count: int, first_us: int, last_us: int) -> None:
    """Count ``count`` new messages of ``key`` created between ``first_us`` and ``last_us``."""
    user, session = key.user_id, key.session_id
    conn.execute(_ADD_KEY, (user, session, key.agent_id, new_epoch(), count, first_us, last_us))
    conn.execute(_ADD_SESSION, (user, session, count, first_us, last_us))


def refresh_keys(conn: sqlite3.Connection, keys: Iterable[tuple[str, str, str]]) -> None:
    """Recount keys that lost messages (their checkpoints deleted): a new epoch, or no row
    when none is left."""
    for key in keys:
        count, first, last = conn.execute(
            f"SELECT count(*), min(created_us), max(created_us) FROM messages WHERE {KEY}", key
        ).fetchone()
        if count:
            conn.execute(
                "UPDATE conversations SET epoch = ?, message_count = ?, first_us = ?, "
                f"last_us = ?, checkpoint_version = 0 WHERE {KEY}",
                (new_epoch(), count, first, last, *key),
            )
        else:
            conn.execute(f"DELETE FROM conversations WHERE {KEY}", key)


def refresh_sessions(conn: sqlite3.Connection, sessions: Iterable[tuple[str, str]]) -> None:
    """Recompute the sessions' rows from their keys' tallies."""
    for user_id, session_id in sessions:
        conn.execute(
            "DELETE FROM sessions WHERE user_id = ? AND session_id = ?", (user_id, session_id)
        )
        conn.execute(
            "INSERT INTO sessions SELECT user_id, session_id, sum(message_count), "
            "min(first_us), max(last_us) FROM conversations "
            "WHERE user_id = ? AND session_id = ? GROUP BY user_id, session_id",
            (user_id, session_id),
        )
