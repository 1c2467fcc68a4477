"""``RecordStorage`` on PostgreSQL: application records kept with a conversation.

Records live in ``<table>_records``, never in the messages table, so ``fetch``, search,
sessions and summaries never see them. Their sequence numbers come from the key's counter in
``<table>_keys`` (under its row lock), so they interleave with the key's messages in commit
order. ``delete``/``delete_user`` erase them with the conversation.
"""

from __future__ import annotations

from storage.abilities import ConversationRecord
from storage.message import ChatKey
from storage.stores.payloads import decode_record, encode_record
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.text import escape_column, key_args

__all__ = ["fetch", "save"]


async def save(
    ctx: PostgresContext, key: ChatKey, record: ConversationRecord
) -> ConversationRecord:
    """Store ``record`` (``created_at`` set; idempotent by id); the record as stored."""
    args = key_args(key)
    assert record.created_at is not None
    pool = await ctx.pool()
    row = await pool.fetchrow(
        ctx.sql.save_record,
        *args,
        escape_column(record.id),
        escape_column(record.kind),
        record.created_at,
        encode_record(record),
    )
    assert row is not None
    seq, created_at, text = row
    return decode_record(text, seq, created_at)


async def fetch(ctx: PostgresContext, key: ChatKey, kind: str | None) -> list[ConversationRecord]:
    """The key's records in store order, of ``kind`` or all."""
    args = key_args(key)
    pool = await ctx.pool()
    if kind is None:
        rows = await pool.fetch(ctx.sql.fetch_records, *args)
    else:
        if not _encodable(kind):
            return []
        rows = await pool.fetch(ctx.sql.fetch_records_of_kind, *args, escape_column(kind))
    return [decode_record(text, seq, at) for seq, at, text in rows]


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
