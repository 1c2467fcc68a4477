"""The SQLite store's schema, its version in ``PRAGMA user_version``, forward migrations.

Version 1: the ``messages`` table (one record per message, ``seq INTEGER PRIMARY KEY
AUTOINCREMENT``, so a sequence number is never reused) and its two indexes.

Version 2 adds, beside it:

- ``conversations``: one row per key holding messages (its epoch, message count, first and
  last ``created_at``, checkpoint version), kept in the same transaction as every write;
- ``sessions``: one row per (user, session) with the totals of its keys, indexed by
  (user, newest activity) so ``list_sessions`` is an index range read, whatever the number
  of messages;
- ``checkpoints`` (one summary per key), ``leases`` (one summarizing lease per key),
  ``records`` (application records, numbered from the messages' own sequence);
- ``messages_fts``: an FTS5 index of each message's normalized words
  (:func:`storage.search.tokenize`), rowid = the message's ``seq``, plus a token naming its
  user so a search only ever reads one user's postings; ``meta.fts_indexed_to`` is the
  highest sequence number it covers (searches index the rest, :mod:`.fts`).

Version 3 adds time travel beside them (nothing of version 2 changes):

- ``rewinds``: one row per rewind of a key (its own ``seq`` from the messages' sequence, the
  message kept last, the range it hid, when);
- ``rewound``: one row per hidden message (key, ``seq``, the rewind's ``seq``), which every
  read of the view leaves out (``seq NOT IN``: one primary-key range probe per read);
- ``checkpoint_versions``: every version of each key's checkpoint (``checkpoints`` keeps
  the current one), filled from ``checkpoints`` by the migration.

A release that knows only version 2 refuses a version-3 file (:func:`check_version`):
reading it would show rewound messages as if they were in the view.

``MIGRATIONS[n]`` holds the SQL statements that take a database from version ``n`` to
``n + 1``, including the statements that fill new tables from the rows already there;
everything runs in one transaction. A database whose version is above :data:`SCHEMA_VERSION`
was written by a newer chatlayers: it is refused before anything is written.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from storage.errors import SchemaVersionError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "check_version", "migrate"]

_V1: Final = (
    """CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        message_id TEXT NOT NULL,
        created_us INTEGER NOT NULL,
        record TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS messages_by_key ON messages (user_id, session_id, agent_id, seq)",
    "CREATE UNIQUE INDEX IF NOT EXISTS messages_by_id ON messages "
    "(user_id, session_id, agent_id, message_id)",
)

_V2: Final = (
    """CREATE TABLE IF NOT EXISTS conversations (
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        epoch TEXT NOT NULL,
        message_count INTEGER NOT NULL,
        first_us INTEGER NOT NULL,
        last_us INTEGER NOT NULL,
        checkpoint_version INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (user_id, session_id, agent_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS sessions (
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        message_count INTEGER NOT NULL,
        first_us INTEGER NOT NULL,
        last_us INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS sessions_by_activity ON sessions "
    "(user_id, last_us DESC, session_id)",
    """CREATE TABLE IF NOT EXISTS checkpoints (
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        epoch TEXT NOT NULL,
        covers_to INTEGER NOT NULL,
        summarizer TEXT NOT NULL,
        created_us INTEGER NOT NULL,
        records TEXT NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS leases (
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        owner TEXT NOT NULL,
        expires REAL NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS records (
        seq INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        record_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        created_us INTEGER NOT NULL,
        data TEXT NOT NULL
    )""",
    "CREATE UNIQUE INDEX IF NOT EXISTS records_by_id ON records "
    "(user_id, session_id, agent_id, record_id)",
    "CREATE INDEX IF NOT EXISTS records_by_key ON records (user_id, session_id, agent_id, seq)",
    """CREATE TABLE IF NOT EXISTS meta (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    ) WITHOUT ROWID""",
    "INSERT OR IGNORE INTO meta (name, value) VALUES ('fts_indexed_to', 0)",
    # Normalized words only, split on spaces (``_`` is part of a word, as in ``\w``).
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5("
    "words, owner, tokenize = \"ascii tokenchars '_'\")",
    # Tallies of the messages a version-1 database holds (the first search indexes them).
    "INSERT OR IGNORE INTO conversations SELECT user_id, session_id, agent_id, "
    "lower(hex(randomblob(8))), count(*), min(created_us), max(created_us), 0 "
    "FROM messages GROUP BY user_id, session_id, agent_id",
    "INSERT OR IGNORE INTO sessions SELECT user_id, session_id, sum(message_count), "
    "min(first_us), max(last_us) FROM conversations GROUP BY user_id, session_id",
)

_V3: Final = (
    """CREATE TABLE IF NOT EXISTS rewinds (
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        rewind_id TEXT NOT NULL,
        to_id TEXT NOT NULL,
        to_seq INTEGER NOT NULL,
        through_seq INTEGER NOT NULL,
        hidden INTEGER NOT NULL,
        created_us INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS rewound (
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        rewind_seq INTEGER NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS checkpoint_versions (
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        epoch TEXT NOT NULL,
        covers_to INTEGER NOT NULL,
        summarizer TEXT NOT NULL,
        created_us INTEGER NOT NULL,
        records TEXT NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id, version)
    ) WITHOUT ROWID""",
    "INSERT OR IGNORE INTO checkpoint_versions SELECT user_id, session_id, agent_id, version, "
    "epoch, covers_to, summarizer, created_us, records FROM checkpoints",
)

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (_V1, _V2, _V3)
SCHEMA_VERSION: Final = len(MIGRATIONS)


def check_version(version: int, where: str) -> None:
    """Refuse a database written by a newer chatlayers.

    Raises:
        SchemaVersionError: ``version`` is above :data:`SCHEMA_VERSION` (both named).
    """
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where}: schema version {version} was written by a newer chatlayers; this "
            f"release knows versions up to {SCHEMA_VERSION}; the file was not written "
            "(upgrade chatlayers to open it)"
        )


def migrate(conn: sqlite3.Connection, where: str) -> None:
    """Bring the database to :data:`SCHEMA_VERSION` in one write transaction.

    Raises:
        SchemaVersionError: the database is newer than this release (nothing written).
        sqlite3.Error: the migration failed (rolled back, the database as it was).
    """
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    check_version(version, where)
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while this one waited for the lock.
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        check_version(version, where)
        for step in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
