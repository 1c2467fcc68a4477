"""Per-key and per-session tallies (``conversations``, ``sessions``), kept in the transaction
of every write and delete, so heads and session listings never scan messages.

A key has a ``conversations`` row exactly while it holds messages; the row's ``epoch`` is new
each time the key starts holding messages again or loses some (delete, replace, purge).

A session's ``last_us`` is its last activity, the order of ``list_sessions``: the newest
``created_at`` saved to it while it held messages, never lowered by deleting some of them
(so a session never moves behind a listing cursor that passed it); its row goes when the
session holds no message.

Both are derived from the messages: a row found missing or unreadable is rebuilt from them
(:func:`rebuild_key`, :func:`rebuild_user`), never trusted over them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Final

from storage.message import ChatKey
from storage.stores.epochs import new_epoch

__all__ = [
    "KEY",
    "add",
    "keys",
    "new_epoch",
    "rebuild_key",
    "rebuild_user",
    "refresh_keys",
    "refresh_sessions",
    "sessions_consistent",
]

KEY: Final = "user_id = ? AND session_id = ? AND agent_id = ?"

_ADD_KEY: Final = (
    "INSERT INTO conversations (user_id, session_id, agent_id, epoch, message_count, first_us, "
    "last_us) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (user_id, session_id, agent_id) DO UPDATE "
    "SET message_count = message_count + excluded.message_count, "
    "first_us = min(first_us, excluded.first_us), last_us = max(last_us, excluded.last_us) "
    "RETURNING message_count"
)
_ADD_SESSION: Final = (
    "INSERT INTO sessions (user_id, session_id, message_count, first_us, last_us) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (user_id, session_id) DO UPDATE "
    "SET message_count = message_count + excluded.message_count, "
    "first_us = min(first_us, excluded.first_us), last_us = max(last_us, excluded.last_us) "
    "RETURNING message_count"
)
_COUNT_KEY: Final = f"SELECT count(*) FROM messages WHERE {KEY}"
_COUNT_SESSION: Final = (
    "SELECT total(message_count) FROM conversations WHERE user_id = ? AND session_id = ?"
)
# Whether a user's session rows agree with the key rows: as many sessions, as many messages,
# every value an integer (cheap: the user's rows of two primary keys).
_CHECK_USER: Final = (
    "SELECT (SELECT count(*) FROM sessions WHERE user_id = ?1) = "
    "(SELECT count(*) FROM (SELECT DISTINCT session_id FROM conversations WHERE user_id = ?1)) "
    "AND (SELECT total(message_count) FROM sessions WHERE user_id = ?1) = "
    "(SELECT total(message_count) FROM conversations WHERE user_id = ?1) "
    "AND NOT EXISTS (SELECT 1 FROM sessions WHERE user_id = ?1 AND (typeof(message_count) "
    "<> 'integer' OR typeof(first_us) <> 'integer' OR typeof(last_us) <> 'integer')) "
    "AND NOT EXISTS (SELECT 1 FROM conversations WHERE user_id = ?1 AND (typeof(message_count) "
    "<> 'integer' OR typeof(first_us) <> 'integer' OR typeof(last_us) <> 'integer' "
    "OR typeof(epoch) <> 'text' OR epoch = '' OR typeof(checkpoint_version) <> 'integer'))"
)


def add(conn: sqlite3.Connection, key: ChatKey, count: int, first_us: int, last_us: int) -> bool:
    """Count ``count`` new messages of ``key`` created between ``first_us`` and ``last_us``.

    Returns:
        False when a row was missing although the key (or session) held messages before
        (it is rebuilt from the messages: the caller reports it).
    """
    user, session = key.user_id, key.session_id
    params = (user, session, key.agent_id)
    (total,) = conn.execute(_ADD_KEY, (*params, new_epoch(), count, first_us, last_us)).fetchone()
    intact = True
    # A row just made (its count is the batch's): check no older message went uncounted.
    if total == count and conn.execute(_COUNT_KEY, params).fetchone()[0] != count:
        rebuild_key(conn, key)
        return False
    (in_session,) = conn.execute(_ADD_SESSION, (user, session, count, first_us, last_us)).fetchone()
    if in_session == count and conn.execute(_COUNT_SESSION, (user, session)).fetchone()[0] != count:
        refresh_sessions(conn, [(user, session)])
        intact = False
    return intact


def rebuild_key(conn: sqlite3.Connection, key: ChatKey) -> None:
    """Recount a key from its messages (inside a write transaction): a new epoch, so every
    cache of it is stale, and its checkpoint dropped (void under the new epoch)."""
    params = (key.user_id, key.session_id, key.agent_id)
    count, first, last = conn.execute(
        f"SELECT count(*), min(created_us), max(created_us) FROM messages WHERE {KEY}", params
    ).fetchone()
    conn.execute(f"DELETE FROM checkpoints WHERE {KEY}", params)
    conn.execute(f"DELETE FROM checkpoint_versions WHERE {KEY}", params)
    conn.execute(f"DELETE FROM conversations WHERE {KEY}", params)
    if count:
        conn.execute(
            "INSERT INTO conversations (user_id, session_id, agent_id, epoch, message_count, "
            "first_us, last_us, checkpoint_version) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
            (*params, new_epoch(), count, first, last),
        )
    refresh_sessions(conn, [(key.user_id, key.session_id)])


def sessions_consistent(conn: sqlite3.Connection, user_id: str) -> bool:
    """Whether the user's session rows agree with their key rows (see :data:`_CHECK_USER`)."""
    return bool(conn.execute(_CHECK_USER, (user_id,)).fetchone()[0])


def rebuild_user(conn: sqlite3.Connection, user_id: str) -> None:
    """Rebuild every tally of a user from the messages (inside a write transaction): key rows
    that disagree with the messages get a new epoch (their checkpoints dropped), then the
    session rows (last activity kept where it is still readable)."""
    counted = {
        (session, agent): (count, first, last)
        for session, agent, count, first, last in conn.execute(
            "SELECT session_id, agent_id, count(*), min(created_us), max(created_us) "
            "FROM messages WHERE user_id = ? GROUP BY session_id, agent_id",
            (user_id,),
        )
    }
    rows = conn.execute(
        "SELECT session_id, agent_id, epoch, message_count, first_us, last_us, "
        "checkpoint_version FROM conversations WHERE user_id = ?",
        (user_id,),
    ).fetchall()
    kept = {
        (session, agent)
        for session, agent, epoch, count, first, last, version in rows
        if counted.get((session, agent)) == (count, first, last)
        and type(epoch) is str
        and epoch
        and type(version) is int
    }
    for session, agent, *_ in rows:
        if (session, agent) not in kept:
            params = (user_id, session, agent)
            conn.execute(f"DELETE FROM conversations WHERE {KEY}", params)
            conn.execute(f"DELETE FROM checkpoints WHERE {KEY}", params)
            conn.execute(f"DELETE FROM checkpoint_versions WHERE {KEY}", params)
    for (session, agent), (count, first, last) in counted.items():
        if (session, agent) not in kept:
            params = (user_id, session, agent)
            conn.execute(f"DELETE FROM checkpoints WHERE {KEY}", params)
            conn.execute(f"DELETE FROM checkpoint_versions WHERE {KEY}", params)
            conn.execute(
                "INSERT INTO conversations (user_id, session_id, agent_id, epoch, "
                "message_count, first_us, last_us, checkpoint_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                (*params, new_epoch(), count, first, last),
            )
    conn.execute(
        "DELETE FROM sessions WHERE user_id = ? AND (typeof(last_us) <> 'integer' "
        "OR session_id NOT IN (SELECT session_id FROM conversations WHERE user_id = ?))",
        (user_id, user_id),
    )
    sessions = {session for session, _ in counted}
    refresh_sessions(conn, [(user_id, session) for session in sorted(sessions)])


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
    """Recompute the sessions' rows from their keys' tallies, keeping each session's last
    activity when it still holds messages (a readable one: an unreadable one is recomputed)."""
    for user_id, session_id in sessions:
        params = (user_id, session_id)
        row = conn.execute(
            "SELECT last_us FROM sessions WHERE user_id = ? AND session_id = ?", params
        ).fetchone()
        active = row[0] if row is not None and type(row[0]) is int else None
        conn.execute("DELETE FROM sessions WHERE user_id = ? AND session_id = ?", params)
        conn.execute(
            "INSERT INTO sessions SELECT user_id, session_id, sum(message_count), "
            "min(first_us), max(max(last_us), coalesce(?, 0)) FROM conversations "
            "WHERE user_id = ? AND session_id = ? GROUP BY user_id, session_id",
            (active, *params),
        )


def keys(conn: sqlite3.Connection, user_id: str | None, session_id: str | None) -> list[ChatKey]:
    """Every key with a tally row (a key holding messages), of the user and session given."""
    clauses: list[str] = []
    params: list[str] = []
    if user_id is not None:
        clauses.append("user_id = ?")
        params.append(user_id)
    if session_id is not None:
        clauses.append("session_id = ?")
        params.append(session_id)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT user_id, session_id, agent_id FROM conversations{where}", params
    ).fetchall()
    return [ChatKey(*row) for row in rows]
