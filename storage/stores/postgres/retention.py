"""``RetentionStorage`` on PostgreSQL: delete messages older than the ``retention`` period.

Each key holding an old message (found through the ``created_at`` index) is purged in its
own transaction under the key's row lock (the lock every writer of the key takes): its
messages up to the newest old one are read, tool groups are widened whole
(:func:`storage.history.whole_tool_groups`: when any message of an assistant's tool calls and
their results is older than the cut-off, the whole group goes, so the record never holds a
result without its call or a call without its results), the doomed rows are deleted, the
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
from storage.history import ends_tool_group, whole_tool_groups
from storage.message import ChatMessage
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
        messages = [_message(record) for _, _, record in rows]
        drop, open_group = whole_tool_groups(messages, [at < before for _, at, _ in rows])
        doomed = [row[0] for row, gone in zip(rows, drop, strict=True) if gone]
        if open_group:  # the group that goes has results after the newest old message
            doomed += await _trailing_results(ctx, conn, key, last_old)
        active = await conn.fetchval(sql.session_last, key[0], key[1])
        await conn.execute(sql.purge_delete, *key, doomed)
        await conn.execute(sql.drop_checkpoint, *key)
        await conn.execute(sql.recount_key, *key)
        await conn.execute(sql.drop_empty_key, *key)
        await conn.execute(sql.refresh, key[0], key[1])
        if active is not None:
            await conn.execute(sql.keep_last, key[0], key[1], active)
    return len(doomed)


async def _trailing_results(
    ctx: PostgresContext, conn: Any, key: tuple[str, str, str], after: int
) -> list[int]:
    """The ``tool`` rows after ``after`` up to the next assistant message with calls."""
    out: list[int] = []
    while True:
        more = await conn.fetch(ctx.sql.purge_more, *key, after, _CHUNK)
        for seq, record in more:
            message = _message(record)
            if ends_tool_group(message):
                return out
            if message.role == "tool":
                out.append(seq)
        if len(more) < _CHUNK:
            return out
        after = more[-1][0]
