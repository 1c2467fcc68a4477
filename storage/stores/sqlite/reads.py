"""Reads of the SQLite store: fetch (through the decoded-message cache), tails, sessions.

A record is never rewritten and a sequence number never reused (``AUTOINCREMENT``), so a
fetch first reads only the key's sequence numbers of its view (an index-only scan, the
rewound ones left out) and returns the
messages it decoded before; when some are new, one statement reads the records from the
oldest new one on. Every fetch still asks the database which messages exist, so writes and
deletes by other processes are always seen.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Final

from storage.abilities import Head, Rewind, Tail, Timeline, mark_rewound
from storage.codec import DecodeCache, decode
from storage.history import drop_orphaned_results
from storage.message import ChatKey, ChatMessage
from storage.stores.base import SessionRow
from storage.stores.sqlite import checkpoints
from storage.stores.times import from_us

__all__ = ["fetch", "session_rows", "since", "timeline"]

# The key as numbered parameters ?1-?3, so the view's filter reuses them.
_KEY: Final = "user_id = ?1 AND session_id = ?2 AND agent_id = ?3"
# The view leaves out the rewound messages: one primary-key range probe of ``rewound``
# (nothing found for a key never rewound), the messages still read from the index alone.
_VIEW: Final = f"{_KEY} AND seq NOT IN (SELECT seq FROM rewound WHERE {_KEY})"
# Sequence numbers only: answered from the (user, session, agent, seq) index alone.
_SEQS: Final = f"SELECT seq FROM messages WHERE {_VIEW} ORDER BY seq"
_SEQS_LAST: Final = f"SELECT seq FROM messages WHERE {_VIEW} ORDER BY seq DESC LIMIT ?4"
# Records from sequence ?4 on (older rows come without theirs: SQLite then never reads their
# table row); one statement, so it sees one snapshot of the database.
_ROWS: Final = (
    f"SELECT seq, CASE WHEN seq >= ?4 THEN record END FROM messages WHERE {_VIEW} ORDER BY seq"
)
_ROWS_LAST: Final = (
    f"SELECT seq, CASE WHEN seq >= ?4 THEN record END FROM messages WHERE {_VIEW} "
    "ORDER BY seq DESC LIMIT ?5"
)
# Without a cache: the records alone.
_RECORDS: Final = f"SELECT record FROM messages WHERE {_VIEW} ORDER BY seq"
_RECORDS_LAST: Final = f"SELECT record FROM messages WHERE {_VIEW} ORDER BY seq DESC LIMIT ?4"
_SINCE: Final = f"SELECT seq, record FROM messages WHERE {_VIEW} AND seq > ?4 ORDER BY seq"
# The whole record, rewound messages included (time travel).
_ALL: Final = f"SELECT seq, record FROM messages WHERE {_KEY} ORDER BY seq"
# Every message of the session, a rewound one with the time of its rewind.
_SESSION: Final = (
    "SELECT m.seq, m.agent_id, m.record, w.created_us FROM messages m "
    "LEFT JOIN rewound r ON r.user_id = m.user_id AND r.session_id = m.session_id "
    "AND r.agent_id = m.agent_id AND r.seq = m.seq "
    "LEFT JOIN rewinds w ON w.user_id = r.user_id AND w.session_id = r.session_id "
    "AND w.agent_id = r.agent_id AND w.seq = r.rewind_seq "
    "WHERE m.user_id = ? AND m.session_id = ?"
)
_OLDEST: Final = datetime.min.replace(tzinfo=UTC)


def fetch(
    conn: sqlite3.Connection, cache: DecodeCache, key: ChatKey, limit: int | None
) -> list[ChatMessage]:
    """The key's messages oldest first; with ``limit`` (>= 1) the newest, tool-pair safe."""
    params = (key.user_id, key.session_id, key.agent_id)
    if limit is None:
        if not cache.max_chars:
            return [decode(r) for (r,) in conn.execute(_RECORDS, params).fetchall()]
        cached = cache.messages
        seqs = conn.execute(_SEQS, params).fetchall()
        try:
            return [cached[seq] for (seq,) in seqs]
        except KeyError as exc:
            rows = conn.execute(_ROWS, (*params, exc.args[0])).fetchall()
        return _decode(conn, cache, rows, _ROWS, params)
    if not cache.max_chars:
        records = conn.execute(_RECORDS_LAST, (*params, limit)).fetchall()
        records.reverse()
        return drop_orphaned_results([decode(r) for (r,) in records])
    seqs = conn.execute(_SEQS_LAST, (*params, limit)).fetchall()
    seqs.reverse()
    return drop_orphaned_results(_window(conn, cache, seqs, params, limit))


def _window(
    conn: sqlite3.Connection,
    cache: DecodeCache,
    seqs: list[tuple[int]],
    params: tuple[str, str, str],
    limit: int,
) -> list[ChatMessage]:
    cached = cache.messages
    try:
        return [cached[seq] for (seq,) in seqs]
    except KeyError as exc:
        rows = conn.execute(_ROWS_LAST, (*params, exc.args[0], limit)).fetchall()
    rows.reverse()
    return _decode(conn, cache, rows, _ROWS_LAST, params, limit, reverse=True)


def _decode(
    conn: sqlite3.Connection,
    cache: DecodeCache,
    rows: list[tuple[int, str | None]],
    query: str,
    params: tuple[str, str, str],
    limit: int | None = None,
    *,
    reverse: bool = False,
) -> list[ChatMessage]:
    try:
        return cache.decode_rows(rows)
    except KeyError:
        # A row the first read found cached is not any more (cannot happen while the
        # cache is only touched on this thread); read every record instead.
        args = (*params, 0) if limit is None else (*params, 0, limit)
        rows = conn.execute(query, args).fetchall()
        if reverse:
            rows.reverse()
        return cache.decode_rows(rows)


def since(conn: sqlite3.Connection, cache: DecodeCache, key: ChatKey, after: int) -> Tail | None:
    """Messages with ``seq > after`` and the head in one read transaction, or ``None`` when
    the key's tally is missing or unreadable (rebuild it, then read again)."""
    conn.execute("BEGIN")  # one snapshot for the head and the rows
    try:
        head: Head | None = checkpoints.head(conn, key)
        rows = (
            conn.execute(_SINCE, (key.user_id, key.session_id, key.agent_id, after)).fetchall()
            if head is not None and head.last_seq > after
            else []
        )
    finally:
        conn.execute("COMMIT")
    if head is None:
        return None
    messages = cache.decode_rows(rows)
    return Tail(head, tuple(seq for seq, _ in rows), tuple(messages))


def session_rows(
    conn: sqlite3.Connection, cache: DecodeCache, user_id: str, session_id: str
) -> list[SessionRow]:
    """Every message of the session with its sequence number and agent, any order."""
    rows = conn.execute(_SESSION, (user_id, session_id)).fetchall()
    messages = cache.decode_rows((seq, record) for seq, _, record, _ in rows)
    return [
        (
            m.created_at or _OLDEST,
            seq,
            agent_id,
            m if rewound is None else mark_rewound(m, from_us(rewound).isoformat()),
        )
        for (seq, agent_id, _, rewound), m in zip(rows, messages, strict=True)
    ]


def timeline(conn: sqlite3.Connection, cache: DecodeCache, key: ChatKey) -> Timeline | None:
    """The key's whole record and rewinds with its head in one read transaction, or
    ``None`` when its tally is missing or unreadable (rebuild it, then read again)."""
    params = (key.user_id, key.session_id, key.agent_id)
    conn.execute("BEGIN")  # one snapshot for the head, the rows and the rewinds
    try:
        head = checkpoints.head(conn, key)
        rows = conn.execute(_ALL, params).fetchall() if head is not None else []
        rewinds = conn.execute(_REWINDS, params).fetchall() if rows else []
    finally:
        conn.execute("COMMIT")
    if head is None:
        return None
    messages = cache.decode_rows(rows)
    return Timeline(
        head,
        tuple(seq for seq, _ in rows),
        tuple(messages),
        tuple(
            Rewind(to_id, to_seq, through, hidden, from_us(us), seq, rewind_id)
            for seq, rewind_id, to_id, to_seq, through, hidden, us in rewinds
        ),
    )


_REWINDS: Final = (
    "SELECT seq, rewind_id, to_id, to_seq, through_seq, hidden, created_us FROM rewinds "
    f"WHERE {_KEY} ORDER BY seq"
)
