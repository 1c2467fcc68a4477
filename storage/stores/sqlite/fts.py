"""The SQLite store's full-text index (FTS5), brought up to date by each search, one user's
postings read at a time.

Saves pay nothing for search: FTS5 writes a new index segment on every commit (measured: it
would triple the cost of saving one message). Instead ``meta.fts_indexed_to`` remembers the
highest sequence number indexed, and a search first indexes every message above it in one
write transaction (:func:`catch_up`). Sequence numbers follow commit order, so every message
at or below the mark is indexed and none above it is. Deleting a message removes its index
row in the same transaction.

Each message with searchable text gets one row whose rowid is the message's ``seq``: its
normalized words (:func:`storage.search.tokenize` of :func:`storage.search.message_search_text`,
so matching is exactly the rule every store follows: words, case- and accent-insensitive) and
an ``owner`` token derived from its user id. A search asks FTS5 for ``owner`` *and* any of
the query's words, so only that user's postings are read, then joins the messages table
(checking ``user_id`` again). The query is built from the words alone, each quoted, so FTS5
syntax characters in what a user typed can never reach the FTS5 parser.

The index is derived from the messages: a mark that cannot be right (missing, not a number,
above the highest sequence number ever given) or an index SQLite reports as damaged is
dropped and rebuilt from the messages (:func:`reset`; the next searches index everything
again), so a broken index can neither raise nor hide a message from search.

Erasure: FTS5 (before SQLite 3.44's ``secure-delete``) removes a row by adding delete
markers, and the deleted words stay in the index's segments until they are merged;
:func:`erase` merges the whole index (``optimize``), which rewrites it (cost grows with the
index size: about 19 ms per 10,000 indexed messages here), after which ``secure_delete``
has zeroed the old pages.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Final

from storage.codec import decode
from storage.message import ChatMessage
from storage.search import message_search_text, tokenize

__all__ = [
    "CREATE",
    "broken",
    "catch_up",
    "corruption",
    "erase",
    "index_rows",
    "indexed_to",
    "mark_valid",
    "match_query",
    "owner_token",
    "reset",
    "stale",
    "unindex",
]

# The index table (schema version 2): normalized words only, split on spaces (``_`` is part
# of a word, as in ``\w``).
CREATE: Final = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5("
    "words, owner, tokenize = \"ascii tokenchars '_'\")"
)
# A mark that cannot be read counts as "everything indexed" for deletes (so they always
# remove index rows) until a search resets the index.
_UNREADABLE: Final = 2**62

_INSERT: Final = "INSERT INTO messages_fts (rowid, words, owner) VALUES (?, ?, ?)"
_MARK: Final = "SELECT value FROM meta WHERE name = 'fts_indexed_to'"
# bm25 weights: the words count, the owner token does not.
_SEARCH: Final = (
    "SELECT m.seq, m.session_id, m.agent_id, m.record, bm25(messages_fts, 1.0, 0.0) AS score "
    "FROM messages_fts JOIN messages m ON m.seq = messages_fts.rowid "
    "WHERE messages_fts MATCH ? AND m.user_id = ? "
    "ORDER BY score, m.created_us DESC, m.seq DESC LIMIT ?"
)


def owner_token(user_id: str) -> str:
    """The index token naming ``user_id``'s rows (letters and digits only)."""
    digest = hashlib.blake2b(user_id.encode("utf-8"), digest_size=12).hexdigest()
    return f"u{digest}"


def index_rows(conn: sqlite3.Connection, rows: Iterable[tuple[int, str, ChatMessage]]) -> None:
    """Index ``(seq, user_id, message)`` rows (messages without words are skipped)."""
    out = []
    owner = ""
    last_user: str | None = None
    for seq, user_id, message in rows:
        words = " ".join(tokenize(message_search_text(message)))
        if not words:
            continue
        if user_id != last_user:
            owner, last_user = owner_token(user_id), user_id
        out.append((seq, words, owner))
    if len(out) == 1:
        conn.execute(_INSERT, out[0])
    elif out:
        conn.executemany(_INSERT, out)


def indexed_to(conn: sqlite3.Connection) -> int:
    """The highest sequence number the index covers (a huge number when the mark cannot be
    read: see :func:`mark_valid`)."""
    row = conn.execute(_MARK).fetchone()
    return row[0] if row is not None and type(row[0]) is int else _UNREADABLE


def mark_valid(conn: sqlite3.Connection) -> bool:
    """Whether the mark can be right: a number between 0 and the highest sequence number the
    messages' sequence ever gave."""
    mark = indexed_to(conn)
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
    top = row[0] if row is not None and type(row[0]) is int else 0
    return 0 <= mark <= top


def corruption(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite reporting damaged data (not a busy or missing database)."""
    name = getattr(exc, "sqlite_errorname", "")
    return isinstance(exc, sqlite3.DatabaseError) and str(name).startswith("SQLITE_CORRUPT")


def broken(conn: sqlite3.Connection) -> bool:
    """Whether FTS5's own integrity check finds the index damaged (it reads the whole index:
    only after an error that reported damage)."""
    try:
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
    except sqlite3.DatabaseError as exc:
        if corruption(exc):
            return True
        raise
    return False


def reset(conn: sqlite3.Connection) -> None:
    """Drop the index and start it over empty (inside a write transaction): the next
    searches index every message again."""
    conn.execute("DROP TABLE IF EXISTS messages_fts")
    conn.execute(CREATE)
    conn.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('fts_indexed_to', 0)")


def catch_up(conn: sqlite3.Connection, most: int = 5000) -> None:
    """Index up to ``most`` messages above the mark (inside a write transaction; call again
    while :func:`stale`, so a large backlog never holds the write lock for long)."""
    mark = indexed_to(conn)
    rows = conn.execute(
        "SELECT seq, user_id, record FROM messages WHERE seq > ? ORDER BY seq LIMIT ?",
        (mark, most),
    ).fetchall()
    if rows:
        index_rows(conn, [(seq, user, decode(record)) for seq, user, record in rows])
        conn.execute("UPDATE meta SET value = ? WHERE name = 'fts_indexed_to'", (rows[-1][0],))


def stale(conn: sqlite3.Connection) -> bool:
    """Whether messages above the mark exist (two indexed reads)."""
    (top,) = conn.execute("SELECT coalesce(max(seq), 0) FROM messages").fetchone()
    return bool(top > indexed_to(conn))


def unindex(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> None:
    """Remove the index rows of the messages ``WHERE where`` (before they are deleted)."""
    conn.execute(
        f"DELETE FROM messages_fts WHERE rowid IN (SELECT seq FROM messages WHERE {where})",
        params,
    )


def erase(conn: sqlite3.Connection) -> None:
    """Merge the index into one segment, so removed words are nowhere in it any more."""
    conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")


def search(
    conn: sqlite3.Connection, user_id: str, terms: Sequence[str], limit: int
) -> list[tuple[int, str, str, str, float]]:
    """``(seq, session_id, agent_id, record, bm25)`` of ``user_id``'s best ``limit`` messages
    holding any of ``terms``, best first (bm25 ascending, then the newer message); call
    :func:`catch_up` first when :func:`stale`."""
    return conn.execute(_SEARCH, (match_query(user_id, terms), user_id, limit)).fetchall()


def match_query(user_id: str, terms: Sequence[str]) -> str:
    """The FTS5 query for ``user_id``'s rows holding any of ``terms`` (normalized words)."""
    quoted = ('"' + t.replace('"', '""') + '"' for t in terms)  # strings, never syntax
    words = " OR ".join(quoted)
    return f'owner : "{owner_token(user_id)}" AND words : ({words})'
