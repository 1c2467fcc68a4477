"""Application records of the SQLite store: their own table, numbered from the messages'
sequence (so a record's ``seq`` orders it among the key's messages), never read by
``fetch``, ``fetch_all_chats`` or an export; erased with the conversation."""

from __future__ import annotations

import json
import sqlite3
from typing import Final

import attrs

from storage.abilities import ConversationRecord
from storage.message import ChatKey, thaw
from storage.stores.payloads import dumps
from storage.stores.sqlite.tallies import KEY
from storage.stores.sqlite.writes import from_us, next_seq, to_us

__all__ = ["fetch", "save"]

_COLUMNS: Final = "seq, record_id, kind, created_us, data"


def _record(row: tuple[int, str, str, int, str]) -> ConversationRecord:
    seq, record_id, kind, created_us, data = row
    return ConversationRecord(kind, json.loads(data), record_id, from_us(created_us), seq)


def save(conn: sqlite3.Connection, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
    """Store ``record`` (``created_at`` set; inside a write transaction); the stored one when
    its id exists."""
    params = (key.user_id, key.session_id, key.agent_id)
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM records WHERE {KEY} AND record_id = ?", (*params, record.id)
    ).fetchone()
    if row is not None:
        return _record(row)
    assert record.created_at is not None
    created = to_us(record.created_at)
    stored = attrs.evolve(record, created_at=from_us(created), seq=next_seq(conn))
    conn.execute(
        "INSERT INTO records (seq, user_id, session_id, agent_id, record_id, kind, created_us, "
        "data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (stored.seq, *params, stored.id, stored.kind, created, dumps(thaw(record.data))),
    )
    return stored


def fetch(conn: sqlite3.Connection, key: ChatKey, kind: str | None) -> list[ConversationRecord]:
    """The key's records in store order, optionally of one kind."""
    params: tuple[str, ...] = (key.user_id, key.session_id, key.agent_id)
    where = KEY
    if kind is not None:
        where += " AND kind = ?"
        params += (kind,)
    rows = conn.execute(f"SELECT {_COLUMNS} FROM records WHERE {where} ORDER BY seq", params)
    return [_record(row) for row in rows]
