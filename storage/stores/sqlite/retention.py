"""Retention purges of the SQLite store: messages older than the cut-off go, with the
checkpoints of their keys; each key touched starts a new epoch; records stay."""

from __future__ import annotations

import sqlite3

from storage.stores.sqlite import fts, tallies
from storage.stores.sqlite.tallies import KEY
from storage.stores.sqlite.writes import remove

__all__ = ["purge"]


def purge(conn: sqlite3.Connection, cutoff_us: int) -> list[int]:
    """Delete messages created before ``cutoff_us`` (inside a write transaction); their
    sequence numbers."""
    # The tallies say which keys hold old messages: no scan of the messages table.
    keys = conn.execute(
        "SELECT user_id, session_id, agent_id FROM conversations WHERE first_us < ?",
        (cutoff_us,),
    ).fetchall()
    seqs: list[int] = []
    for key in keys:
        seqs += remove(conn, f"{KEY} AND created_us < ?", (*key, cutoff_us), erase=False)
        conn.execute(f"DELETE FROM checkpoints WHERE {KEY}", key)
    if seqs and min(seqs) <= fts.indexed_to(conn):
        fts.erase(conn)  # once for all the keys
    tallies.refresh_keys(conn, keys)
    tallies.refresh_sessions(conn, {(user, session) for user, session, _ in keys})
    return seqs
