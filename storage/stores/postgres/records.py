"""``RecordStorage`` on PostgreSQL: application records kept with a conversation.

Records live in ``<table>_records``, never in the messages table, so ``fetch``, search,
sessions and summaries never see them. Their sequence numbers come from the key's counter in
``<table>_keys`` (under its row lock), so they interleave with the key's messages in commit
order. ``delete``/``delete_user`` erase them with the conversation.
"""

from __future__ import annotations

import json
from datetime import datetime

from storage.abilities import ConversationRecord
from storage.errors import CorruptRecordError
from storage.message import ChatKey, thaw
from storage.stores.base import check_key
from storage.stores.checks import check_record
from storage.stores.postgres.core import PostgresCore
from storage.stores.postgres.text import escape_column, key_args

__all__ = ["RecordsMixin"]


def _encode(record: ConversationRecord) -> str:
    return json.dumps(
        {"id": record.id, "kind": record.kind, "data": thaw(record.data)},
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=False,
    )


def _decode(seq: int, created_at: datetime, text: str) -> ConversationRecord:
    try:
        data = json.loads(text)
        return ConversationRecord(data["kind"], data["data"], data["id"], created_at, seq)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRecordError(f"cannot decode stored record {text[:80]!r}: {exc!r}") from exc


class RecordsMixin(PostgresCore):
    """Application records, ordered with the key's messages."""

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """Store ``record`` (idempotent by id); return it as stored (``seq``, ``created_at``;
        for an id stored already, the stored record).

        Raises:
            InvalidArgumentError: empty ``kind`` or data that is not JSON-like.
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        args = key_args(check_key(key))
        record = check_record(record)
        created_at = record.created_at or self._now()
        pool = self._pool or await self._get_pool()
        row = await pool.fetchrow(
            self._sql.save_record,
            *args,
            escape_column(record.id),
            escape_column(record.kind),
            created_at,
            _encode(record),
        )
        assert row is not None
        return _decode(row[0], row[1], row[2])

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        """The key's records in store order, optionally of one ``kind`` only.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
            CorruptRecordError: a stored record cannot be decoded.
        """
        args = key_args(check_key(key))
        pool = self._pool or await self._get_pool()
        if kind is None:
            rows = await pool.fetch(self._sql.fetch_records, *args)
        else:
            if not isinstance(kind, str) or not kind or not _encodable(kind):
                return []
            rows = await pool.fetch(self._sql.fetch_records_of_kind, *args, escape_column(kind))
        return [_decode(seq, at, text) for seq, at, text in rows]


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
