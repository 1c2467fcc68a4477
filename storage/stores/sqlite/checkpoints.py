"""Summary checkpoints and summarizing leases of the SQLite store (one row per key each).

A checkpoint is stored apart from the messages (``fetch`` never sees it) and is written by
compare-and-set inside one write transaction: the version, the key's epoch and the covered
sequence number are checked under the write lock, so two processes can never both win. A
lease row holds its owner and its expiry in seconds of the store's clock, so a worker that
dies holding it loses it after ``ttl``.

A checkpoint row that does not decode (bad JSON, a wrong field type, a message that does not
decode, a newer format version) is derived data: :func:`load` reports it and returns
``None``, and the compare-and-set against the version the head reports replaces it. A key's
tally row (its epoch and checkpoint version) that is missing while the key holds messages,
or unreadable, makes :func:`head` return ``None``: the caller rebuilds it
(:func:`storage.stores.sqlite.tallies.rebuild_key`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final

import attrs

from storage.abilities import Head, SummaryCheckpoint
from storage.codec import decode, encode
from storage.errors import CorruptRecordError, SchemaVersionError
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import tallies
from storage.stores.sqlite.tallies import KEY
from storage.stores.sqlite.writes import from_us, to_us

__all__ = [
    "EMPTY_HEAD",
    "acquire",
    "head",
    "head_for_write",
    "load",
    "load_version",
    "release",
    "save",
    "store",
]

Unusable = Callable[[str, object, object], None]  # (what, where, detail): count and log it

EMPTY_HEAD: Final = Head(0, "", 0)
# The newest sequence number from the messages index (so it is right whoever wrote the row),
# with the epoch and checkpoint version from the key's tallies row: two lookups, one statement.
_HEAD: Final = (
    "SELECT (SELECT seq FROM messages WHERE user_id = c.user_id AND session_id = c.session_id "
    "AND agent_id = c.agent_id ORDER BY seq DESC LIMIT 1), c.epoch, c.checkpoint_version "
    f"FROM conversations c WHERE {KEY}"
)


_HAS_MESSAGES: Final = f"SELECT 1 FROM messages WHERE {KEY} LIMIT 1"


def head(conn: sqlite3.Connection, key: ChatKey) -> Head | None:
    """The key's head (``Head(0, "", 0)`` when it holds no message), or ``None`` when its
    tally row is missing or unreadable although it holds messages (rebuild it)."""
    params = (key.user_id, key.session_id, key.agent_id)
    row = conn.execute(_HEAD, params).fetchone()
    if row is None:
        # No tally: a key that holds nothing (one more index probe), or a lost row.
        return EMPTY_HEAD if conn.execute(_HAS_MESSAGES, params).fetchone() is None else None
    last, epoch, version = row
    if last is None:
        return EMPTY_HEAD
    if type(epoch) is not str or not epoch or type(version) is not int:
        return None
    return Head(last, epoch, version)


def head_for_write(conn: sqlite3.Connection, key: ChatKey, unusable: Unusable) -> Head:
    """:func:`head` inside a write transaction, a broken tally rebuilt first."""
    found = head(conn, key)
    if found is None:
        unusable("head", key, "missing or unreadable per-key tally")
        tallies.rebuild_key(conn, key)
        found = head(conn, key)
        assert found is not None
    return found


def load(conn: sqlite3.Connection, key: ChatKey, unusable: Unusable) -> SummaryCheckpoint | None:
    """The key's checkpoint of its current epoch, or ``None`` (also when it is unreadable:
    reported through ``unusable`` and ignored)."""
    row = conn.execute(
        "SELECT k.version, k.epoch, k.covers_to, k.summarizer, k.created_us, k.records "
        "FROM checkpoints k JOIN conversations c USING (user_id, session_id, agent_id) "
        "WHERE k.user_id = ? AND k.session_id = ? AND k.agent_id = ? AND k.epoch = c.epoch",
        (key.user_id, key.session_id, key.agent_id),
    ).fetchone()
    if row is None:
        return None
    try:
        return _decode(*row)
    except (CorruptRecordError, SchemaVersionError, TypeError, ValueError, AttributeError) as exc:
        unusable("checkpoint", key, exc)
        return None


def _decode(
    version: object,
    epoch: object,
    covers_to: object,
    summarizer: object,
    created_us: object,
    records: object,
) -> SummaryCheckpoint:
    """A checkpoint row's checkpoint.

    Raises:
        CorruptRecordError, SchemaVersionError: a message does not decode.
        TypeError: a column holds the wrong type.
    """
    if not (
        type(version) is int
        and type(covers_to) is int
        and type(created_us) is int
        and isinstance(epoch, str)
        and isinstance(summarizer, str)
        and isinstance(records, str)
    ):
        raise TypeError("a checkpoint column holds the wrong type")
    messages: tuple[ChatMessage, ...] = tuple(decode(r) for r in records.split("\n"))
    return SummaryCheckpoint(messages, covers_to, epoch, summarizer, from_us(created_us), version)


def save(
    conn: sqlite3.Connection,
    key: ChatKey,
    checkpoint: SummaryCheckpoint,
    expected_version: int,
    unusable: Unusable,
) -> SummaryCheckpoint | None:
    """Compare-and-set (inside a write transaction; ``checkpoint`` already checked). The
    version compared is the tally's, so an unreadable checkpoint is replaced like any other."""
    params = (key.user_id, key.session_id, key.agent_id)
    current = head_for_write(conn, key, unusable)
    if (
        not current.epoch
        or current.checkpoint_version != expected_version
        or checkpoint.epoch != current.epoch
    ):
        return None
    covered = conn.execute(_COVERED, (*params, checkpoint.covers_to)).fetchone()
    if covered is None:
        return None
    stored = attrs.evolve(checkpoint, version=expected_version + 1)
    store(conn, key, stored)
    return stored


# A message of the view (not rewound) with sequence number ?4.
_COVERED: Final = (
    "SELECT 1 FROM messages WHERE user_id = ?1 AND session_id = ?2 AND agent_id = ?3 "
    "AND seq = ?4 AND NOT EXISTS (SELECT 1 FROM rewound WHERE user_id = ?1 "
    "AND session_id = ?2 AND agent_id = ?3 AND seq = ?4)"
)
_COLUMNS: Final = "version, epoch, covers_to, summarizer, created_us, records"


def store(conn: sqlite3.Connection, key: ChatKey, checkpoint: SummaryCheckpoint) -> None:
    """Make ``checkpoint`` (its version set) the key's current one and keep it as that
    version (inside a write transaction)."""
    params = (key.user_id, key.session_id, key.agent_id)
    row = (
        *params,
        checkpoint.version,
        checkpoint.epoch,
        checkpoint.covers_to,
        checkpoint.summarizer,
        to_us(checkpoint.created_at),
        "\n".join(encode(m) for m in checkpoint.messages),  # records are one line each
    )
    for table in ("checkpoints", "checkpoint_versions"):
        conn.execute(
            f"INSERT OR REPLACE INTO {table} (user_id, session_id, agent_id, {_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        )
    conn.execute(
        f"UPDATE conversations SET checkpoint_version = ? WHERE {KEY}",
        (checkpoint.version, *params),
    )


def load_version(
    conn: sqlite3.Connection, key: ChatKey, version: int, unusable: Unusable
) -> SummaryCheckpoint | None:
    """Version ``version`` of the key's checkpoint as kept, whatever its epoch, or ``None``
    (also when it is unreadable: reported through ``unusable``)."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM checkpoint_versions WHERE {KEY} AND version = ?",
        (key.user_id, key.session_id, key.agent_id, version),
    ).fetchone()
    if row is None:
        return None
    try:
        return _decode(*row)
    except (CorruptRecordError, SchemaVersionError, TypeError, ValueError, AttributeError) as exc:
        unusable("checkpoint version", key, exc)
        return None


def acquire(conn: sqlite3.Connection, key: ChatKey, owner: str, ttl: float, now: float) -> bool:
    """Take or extend the lease (inside a write transaction)."""
    params = (key.user_id, key.session_id, key.agent_id)
    held = conn.execute(f"SELECT owner, expires FROM leases WHERE {KEY}", params).fetchone()
    if held is not None and held[0] != owner and held[1] > now:
        return False
    conn.execute(
        "INSERT OR REPLACE INTO leases (user_id, session_id, agent_id, owner, expires) "
        "VALUES (?, ?, ?, ?, ?)",
        (*params, owner, now + ttl),
    )
    return True


def release(conn: sqlite3.Connection, key: ChatKey, owner: str) -> None:
    """Drop the lease if ``owner`` holds it."""
    conn.execute(
        f"DELETE FROM leases WHERE {KEY} AND owner = ?",
        (key.user_id, key.session_id, key.agent_id, owner),
    )
