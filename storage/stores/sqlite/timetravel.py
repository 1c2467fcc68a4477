"""Rewinds of the SQLite store: one write transaction each (schema version 3 tables
``rewinds`` and ``rewound``, :mod:`storage.stores.sqlite.schema`).

A rewind takes its ``seq`` from the messages' own sequence (as a record does), writes one
``rewound`` row per message it hides, gives the key a new epoch and, when the checkpoint
covers only kept messages, stores it again as the next version under that epoch; otherwise
the checkpoint is left void (of the old epoch) with its version still the tally's, so the
next compaction's compare-and-set makes the version after it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Final

import attrs

from storage.message import ChatKey
from storage.stores.base import not_in_view
from storage.stores.epochs import new_epoch
from storage.stores.sqlite import checkpoints
from storage.stores.sqlite.tallies import KEY
from storage.stores.sqlite.writes import next_seq

__all__ = ["rewind"]

Unusable = Callable[[str, object, object], None]

_VIEW: Final = (
    "user_id = ?1 AND session_id = ?2 AND agent_id = ?3 AND seq NOT IN "
    "(SELECT seq FROM rewound WHERE user_id = ?1 AND session_id = ?2 AND agent_id = ?3)"
)


def rewind(
    conn: sqlite3.Connection,
    key: ChatKey,
    to: str,
    rewind_id: str,
    now_us: int,
    unusable: Unusable,
) -> int:
    """Hide the view's messages after message ``to`` (inside a write transaction); how many.

    Raises:
        InvalidArgumentError: ``to`` is not a message of the view (nothing changed).
    """
    params = (key.user_id, key.session_id, key.agent_id)
    head = checkpoints.head_for_write(conn, key, unusable)
    found = conn.execute(
        f"SELECT seq FROM messages WHERE {_VIEW} AND message_id = ?4", (*params, to)
    ).fetchone()
    if found is None:
        raise not_in_view(key, to)
    (to_seq,) = found
    hidden = [
        seq
        for (seq,) in conn.execute(
            f"SELECT seq FROM messages WHERE {_VIEW} AND seq > ?4 ORDER BY seq", (*params, to_seq)
        )
    ]
    if not hidden:
        return 0
    seq = next_seq(conn)
    conn.execute(
        "INSERT INTO rewinds (user_id, session_id, agent_id, seq, rewind_id, to_id, to_seq, "
        "through_seq, hidden, created_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*params, seq, rewind_id, to, to_seq, hidden[-1], len(hidden), now_us),
    )
    conn.executemany(
        "INSERT INTO rewound (user_id, session_id, agent_id, seq, rewind_seq) "
        "VALUES (?, ?, ?, ?, ?)",
        [(*params, hid, seq) for hid in hidden],
    )
    # Read under the old epoch (``load`` returns only the current epoch's checkpoint).
    current = checkpoints.load(conn, key, unusable) if head.checkpoint_version else None
    epoch = new_epoch()
    conn.execute(f"UPDATE conversations SET epoch = ? WHERE {KEY}", (epoch, *params))
    if current is not None and current.epoch == head.epoch and current.covers_to <= to_seq:
        kept = attrs.evolve(current, epoch=epoch, version=head.checkpoint_version + 1)
        checkpoints.store(conn, key, kept)
    return len(hidden)
