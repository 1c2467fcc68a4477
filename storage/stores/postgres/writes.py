"""Writes of the PostgreSQL store: each one call of a server-side function (:mod:`.functions`)
under the key's row lock, or one transaction.

``save`` appends; ``replace`` deletes the key's messages and checkpoint, starts a new epoch
and inserts the new history (its records stay, with their sequence numbers, which keep
growing). With an expected version the function compares the key's version after taking
the lock and raises SQLSTATE ``CL409`` on a mismatch, so nothing is written: that is both
the conditional save and the compare-and-replace. Whatever removes messages of a session
keeps its last activity (:func:`keeping_activity`), so it never moves behind a listing
cursor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import anyio

from storage.codec import encode
from storage.errors import InvalidMessageError
from storage.message import ChatKey, ChatMessage
from storage.stores.base import conflict
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.derived import repair_key
from storage.stores.postgres.functions import CONFLICT_SQLSTATE
from storage.stores.postgres.text import (
    MAX_CALL_BYTES,
    MAX_SEARCH_CHARS,
    escape_column,
    key_args,
    oversized,
    search_words,
    utf8_part,
)

__all__ = ["THREAD_CHARS", "delete_key", "delete_user", "keeping_activity", "write"]

THREAD_CHARS: Final = 1_000_000
"""A batch whose encoded records are longer makes its search words in a worker thread: one
long word (nothing to cut the text at) takes seconds to normalize, the event loop goes on."""


async def write(
    ctx: PostgresContext,
    key: ChatKey,
    batch: Sequence[ChatMessage],
    *,
    expected: str | None = None,
    replace: bool = False,
) -> list[ChatMessage]:
    """One call of ``<table>_save``; the messages newly stored, in order.

    When the key's row has fallen behind its messages (its numbers collide with stored ones:
    a damaged or lost row), the row is rebuilt from them and the write runs again.

    Raises:
        ConflictError: ``expected`` is not the key's version (nothing written).
        InvalidMessageError: the batch is over :data:`.text.MAX_CALL_BYTES` once encoded,
            more than the server takes in one call (nothing sent).
    """
    if expected is not None and "\x00" in expected:
        raise conflict(key, expected)  # no version the store makes holds NUL
    user, session, agent = key_args(key)
    ids = [escape_column(m.id) for m in batch]
    records = [encode(m) for m in batch]
    # Checked before the words are made (the slow part): they are ASCII, at most
    # MAX_SEARCH_CHARS a message.
    size = oversized(ids, records, extra=len(batch) * MAX_SEARCH_CHARS)
    if size is not None:
        raise InvalidMessageError(
            f"{len(batch)} message(s) for {key!r} are {size:,} bytes once encoded; "
            f"PostgreSQL takes at most {MAX_CALL_BYTES:,} in one call: save them in smaller "
            "batches (one message must stay under that too); nothing was stored"
        )
    if sum(map(len, records)) > THREAD_CHARS:
        words = await anyio.to_thread.run_sync(_words, batch)
    else:
        words = _words(batch)
    args = (
        user,
        session,
        agent,
        ids,
        [m.created_at for m in batch],
        records,
        words,
        expected,
        replace,
    )
    for attempt in range(2):
        try:
            if replace:
                stored: list[str] = await keeping_activity(ctx, user, session, ctx.sql.save, *args)
            else:
                stored = await (ctx.current or await ctx.pool()).fetchval(ctx.sql.save, *args)
            break
        except ctx.driver.UniqueViolationError as exc:
            if attempt or exc.constraint_name != ctx.names.table + "_by_key":
                raise
            await repair_key(ctx, key, "its last sequence number fell behind its messages")
        except ctx.driver.PostgresError as exc:
            if getattr(exc, "sqlstate", None) == CONFLICT_SQLSTATE:
                raise conflict(key, expected) from None
            raise
    if len(stored) == len(batch):
        return list(batch)
    new = set(stored)
    return [m for m, i in zip(batch, ids, strict=True) if i in new]


async def keeping_activity(
    ctx: PostgresContext, user: str, session: str, statement: str, *args: Any
) -> Any:
    """Run ``statement`` (a write that removes messages of the session) in a transaction
    that keeps the session's last activity."""
    pool = await ctx.pool()
    async with pool.acquire() as conn, conn.transaction():
        before = await conn.fetchval(ctx.sql.session_last, user, session)
        result = await conn.fetchval(statement, *args)
        if before is not None:
            await conn.execute(ctx.sql.keep_last, user, session, before)
    return result


async def delete_key(ctx: PostgresContext, key: ChatKey) -> None:
    """Erase one conversation: every row holding its text or key, in one transaction."""
    args = key_args(key)
    await keeping_activity(ctx, args[0], args[1], ctx.sql.delete, *args)


async def delete_user(ctx: PostgresContext, user_id: str) -> None:
    """Erase every row of the user, in one statement."""
    pool = await ctx.pool()
    await pool.execute(ctx.sql.delete_user, utf8_part("user_id", user_id))


def _words(batch: Sequence[ChatMessage]) -> list[str]:
    return [search_words(m) for m in batch]
