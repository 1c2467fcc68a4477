"""Time travel on PostgreSQL: timelines (one repeatable-read snapshot) and rewinds (one
transaction under the key's row lock, the lock every writer of the key takes).

A rewind takes its number from the key's sequence (as a record does) together with a new
epoch, writes one ``<table>_rewound`` row per message it hides, and stores the checkpoint
again as the next version under the new epoch when it covers only kept messages; otherwise
the checkpoint row takes the new epoch marked ``void`` (never loaded, its version still the
head's, so the next compaction's compare-and-set makes the version after it).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, cast

from storage.abilities import Head, Rewind, Timeline
from storage.codec import decode
from storage.message import ChatKey
from storage.stores.base import EMPTY_HEAD, not_in_view
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.derived import repair_key
from storage.stores.postgres.text import escape_column, key_args, unescape_column

if TYPE_CHECKING:
    import asyncpg

__all__ = ["rewind", "timeline"]


async def timeline(ctx: PostgresContext, key: ChatKey) -> Timeline:
    """The key's whole record (rewound messages included) and rewinds, in one snapshot."""
    args = key_args(key)
    sql = ctx.sql
    pool = await ctx.pool()
    for attempt in range(2):
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            # FROM (SELECT 1) LEFT JOIN ...: always one row.
            found = cast("asyncpg.Record", await conn.fetchrow(sql.head, *args))
            rows = await conn.fetch(sql.timeline, *args) if found[0] else []
            rewinds = await conn.fetch(sql.rewinds, *args) if rows else []
        if not (found[0] and not found[1]) or attempt:
            break
        await repair_key(ctx, key, "its key row is missing")  # then read again
    head = Head(int(found[0]), found[1], int(found[2])) if found[0] else EMPTY_HEAD
    if not rows:
        return Timeline(EMPTY_HEAD, (), ())
    return Timeline(
        head,
        [seq for seq, _ in rows],
        [decode(record) for _, record in rows],
        [
            Rewind(unescape_column(to_id), to_seq, through, hidden, at, seq, rewind_id)
            for seq, rewind_id, to_id, to_seq, through, hidden, at in rewinds
        ],
    )


async def rewind(ctx: PostgresContext, key: ChatKey, to: str, rewind_id: str, now: datetime) -> int:
    """Hide the view's messages after message ``to``; how many.

    Raises:
        InvalidArgumentError: ``to`` is not a message of the view (nothing changed).
    """
    args = key_args(key)
    sql = ctx.sql
    pool = await ctx.pool()
    async with pool.acquire() as conn, conn.transaction():
        old_epoch = await conn.fetchval(sql.lock_key, *args)
        to_seq = (
            await conn.fetchval(sql.visible_seq, *args, escape_column(to))
            if old_epoch is not None
            else None
        )
        if to_seq is None:
            raise not_in_view(key, to)
        hidden = [row[0] for row in await conn.fetch(sql.visible_after, *args, to_seq)]
        if not hidden:
            return 0
        taken = await conn.fetchrow(sql.take_seq, *args)
        assert taken is not None  # an UPDATE ... RETURNING of the key's row, held locked
        seq, epoch = taken
        await conn.execute(
            sql.insert_rewind,
            *args,
            seq,
            rewind_id,
            escape_column(to),
            to_seq,
            hidden[-1],
            len(hidden),
            now,
        )
        await conn.execute(sql.insert_rewound, *args, hidden, seq)
        current = await conn.fetchrow(sql.checkpoint_row, *args)
        if current is not None and current["epoch"] == old_epoch:
            if not current["void"] and current["covers_to"] <= to_seq:
                row = await conn.fetchrow(
                    sql.restamp_checkpoint, *args, epoch, current["version"] + 1
                )
                assert row is not None  # the checkpoint row read just above, locked
                await conn.execute(sql.copy_version, *args, *row)
            else:
                await conn.execute(sql.void_checkpoint, *args, epoch)
    return len(hidden)
