"""Retention purges of the SQLite store: messages older than the cut-off go, with the
checkpoints of their keys; each key touched starts a new epoch; records stay.

What goes is widened by :func:`storage.purge.purge_mask`: tool groups go whole (never a result
without its call, or a call without its results), and no orphaned answer of a question that
went stays at the front. Each key holding an old message is read up to its newest old message,
and on, in chunks, while the answer depends on what follows (the results of a group that goes,
the messages up to the next user message).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Final

from storage.errors import CorruptRecordError, SchemaVersionError
from storage.message import ChatMessage
from storage.purge import purge_mask
from storage.stores.sqlite import fts, tallies
from storage.stores.sqlite.tallies import KEY
from storage.stores.sqlite.writes import remove

__all__ = ["purge"]

# Decodes (seq, record) rows, through the store's decoded-message cache.
DecodeRows = Callable[[Iterable[tuple[int, str]]], list[ChatMessage]]

_CHUNK: Final = 256
_NOT_A_MESSAGE: Final = ChatMessage("user", "")  # an undecodable row: judged by its age alone


def purge(conn: sqlite3.Connection, cutoff_us: int, decode_rows: DecodeRows) -> list[int]:
    """Delete messages created before ``cutoff_us`` (inside a write transaction), whole tool
    groups at a time; their sequence numbers."""
    # The tallies say which keys hold old messages: no scan of the messages table.
    keys = conn.execute(
        "SELECT user_id, session_id, agent_id FROM conversations WHERE first_us < ?",
        (cutoff_us,),
    ).fetchall()
    seqs: list[int] = []
    for key in keys:
        doomed = _doomed(conn, key, cutoff_us, decode_rows)
        for start in range(0, len(doomed), 500):
            chunk = doomed[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            seqs += remove(conn, f"seq IN ({marks})", chunk, erase=False)
            conn.execute(f"DELETE FROM rewound WHERE {KEY} AND seq IN ({marks})", (*key, *chunk))
        conn.execute(f"DELETE FROM checkpoints WHERE {KEY}", key)
        conn.execute(f"DELETE FROM checkpoint_versions WHERE {KEY}", key)
    if seqs and min(seqs) <= fts.indexed_to(conn):
        fts.erase(conn)  # once for all the keys
    tallies.refresh_keys(conn, keys)
    tallies.refresh_sessions(conn, {(user, session) for user, session, _ in keys})
    return seqs


def _doomed(
    conn: sqlite3.Connection, key: tuple[str, str, str], cutoff_us: int, decode_rows: DecodeRows
) -> list[int]:
    """The sequence numbers of one key's messages a purge deletes."""
    (last_old,) = conn.execute(
        f"SELECT max(seq) FROM messages WHERE {KEY} AND created_us < ?", (*key, cutoff_us)
    ).fetchone()
    if last_old is None:
        return []
    rows = conn.execute(
        f"SELECT seq, created_us, record FROM messages WHERE {KEY} AND seq <= ? ORDER BY seq",
        (*key, last_old),
    ).fetchall()
    seqs = [seq for seq, _, _ in rows]
    messages = _decoded(decode_rows, [(seq, record) for seq, _, record in rows])
    old = [us < cutoff_us for _, us, _ in rows]
    drop, more = purge_mask(messages, old)
    while more:  # the answer depends on the messages after the newest old one
        chunk = conn.execute(
            f"SELECT seq, record FROM messages WHERE {KEY} AND seq > ? ORDER BY seq LIMIT ?",
            (*key, seqs[-1], _CHUNK),
        ).fetchall()
        if not chunk:
            break
        seqs += [seq for seq, _ in chunk]
        messages += _decoded(decode_rows, chunk)
        old += [False] * len(chunk)
        drop, more = purge_mask(messages, old)
    return [seq for seq, gone in zip(seqs, drop, strict=True) if gone]


def _decoded(decode_rows: DecodeRows, rows: list[tuple[int, str]]) -> list[ChatMessage]:
    """The rows' messages; a record that does not decode stands for a plain message, so a
    damaged row can neither stop retention nor join a tool group."""
    try:
        return decode_rows(rows)
    except (CorruptRecordError, SchemaVersionError):
        out = []
        for row in rows:
            try:
                out += decode_rows([row])
            except (CorruptRecordError, SchemaVersionError):
                out.append(_NOT_A_MESSAGE)
        return out
