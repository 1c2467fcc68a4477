"""``RetentionStorage`` on PostgreSQL: delete messages older than the ``retention`` period.

Each key holding an old message (found through the ``created_at`` index) is purged in its
own transaction under the key's row lock (the lock every writer of the key takes): its
messages up to the newest old one are read (and on while the answer depends on what
follows), what goes is widened by :func:`storage.purge.purge_mask` (tool groups whole, no
orphaned answers of a question that went at the front), the doomed rows are deleted, the
key's checkpoint dropped, a new epoch started (every cache of it is stale) and its session's
summary recomputed, keeping the session's last activity; a key left with no message and no
record is removed. Writes call it automatically at most once per ``purge_interval`` per store
instance; ``chatlayers purge`` (or :meth:`purge`) runs it now.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from storage.codec import decode
from storage.errors import ChatStorageError
from storage.message import ChatMessage
from storage.purge import purge_mask
from storage.stores.postgres.context import PostgresContext

__all__ = ["purge"]

_CHUNK: Final = 256
_NOT_A_MESSAGE: Final = ChatMessage("user", "")  # an undecodable row: judged by its age alone


def _message(record: str) -> ChatMessage:
    try:
        return decode(record)
    except ChatStorageError:  # the row's own damage must not stop retention
        return _NOT_A_MESSAGE


async def purge(ctx: PostgresContext, before: datetime) -> int:
    """Delete the messages created before ``before``, key by key; how many went."""
    pool = await ctx.pool()
    deleted = 0
    for user, session, agent in await pool.fetch(ctx.sql.purge_keys, before):
        deleted += await _purge_key(ctx, (user, session, agent), before)
    return deleted


async def _purge_key(ctx: PostgresContext, key: tuple[str, str, str], before: datetime) -> int:
    sql = ctx.sql
    pool = await ctx.pool()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(sql.lock_key, *key)
        last_old = await conn.fetchval(sql.last_old, *key, before)
        if last_old is None:
            return 0
        rows = await conn.fetch(sql.purge_rows, *key, last_old)
        doomed = await _doomed(ctx, conn, key, rows, before)
        active = await conn.fetchval(sql.session_last, key[0], key[1])
        await conn.execute(sql.purge_delete, *key, doomed)
        await conn.execute(sql.drop_checkpoint, *key)
        await conn.execute(sql.recount_key, *key)
        await conn.execute(sql.drop_empty_key, *key)
        await conn.execute(sql.refresh, key[0], key[1])
        if active is not None:
            await conn.execute(sql.keep_last, key[0], key[1], active)
    return len(doomed)


async def _doomed(
    ctx: PostgresContext, conn: Any, key: tuple[str, str, str], rows: Any, before: datetime
) -> list[int]:
    """The key's sequence numbers the purge deletes (:func:`storage.purge.purge_mask`), read
    on in chunks after the newest old message while the answer depends on what follows."""
    seqs = [row[0] for row in rows]
    messages = [_message(record) for _, _, record in rows]
    old = [at < before for _, at, _ in rows]
    drop, more = purge_mask(messages, old)
    while more:
        chunk = await conn.fetch(ctx.sql.purge_more, *key, seqs[-1], _CHUNK)
        if not chunk:
            break
        seqs += [seq for seq, _ in chunk]
        messages += [_message(record) for _, record in chunk]
        old += [False] * len(chunk)
        drop, more = purge_mask(messages, old)
    return [seq for seq, gone in zip(seqs, drop, strict=True) if gone]
