"""Derived rows of the PostgreSQL store rebuilt from the messages, never trusted over them.

``<table>_keys`` (a key's last sequence number, epoch and counts) and ``<table>_sessions``
(the listing's tallies) are kept in the transaction of every write, so they only break by
hand or by a bug. When they do:

- a key row missing while the key holds messages (a head with messages but no epoch) is
  rebuilt from them (:func:`repair_key`: a new epoch, so its checkpoint is
  void), by ``head``, ``fetch_since`` and the write that meets it;
- a key row whose last sequence number fell behind (a write's numbers collide with stored
  ones) is rebuilt the same way and the write runs again;
- a user's session rows that disagree with the key rows (how many sessions, how many
  messages) are rebuilt, key rows from the messages first (:func:`rebuild_user`).

Each is logged once and counted in ``corrupt_derived``.
"""

from __future__ import annotations

from storage.message import ChatKey
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.text import key_args

__all__ = ["rebuild_user", "repair_key", "sessions_consistent"]


async def repair_key(ctx: PostgresContext, key: ChatKey, why: str) -> None:
    """Rebuild one key's row from its messages and records, in one transaction under the
    row's lock: numbering goes on above every stored number, in a new epoch."""
    args = key_args(key)
    ctx.unusable("head", key, why)
    pool = await ctx.pool()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(ctx.sql.lock_key, *args)
        await conn.execute(ctx.sql.repair_key, *args)
        await conn.execute(ctx.sql.drop_checkpoint, *args)
        await conn.execute(ctx.sql.refresh, args[0], args[1])


async def sessions_consistent(ctx: PostgresContext, user: str) -> bool:
    """Whether the user's session rows agree with the key rows (counts of both)."""
    pool = await ctx.pool()
    return bool(await pool.fetchval(ctx.sql.sessions_check, user))


async def rebuild_user(ctx: PostgresContext, user: str) -> None:
    """Rebuild a user's key rows from the messages, then the session rows from them."""
    ctx.unusable("session tally", f"user {user!r}", "disagrees with the keys")
    pool = await ctx.pool()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(ctx.sql.rebuild_user_keys, user)
        await conn.execute(ctx.sql.empty_user_keys, user)
        await conn.execute(ctx.sql.refresh_user, user)
