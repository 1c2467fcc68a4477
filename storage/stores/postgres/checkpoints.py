"""``CheckpointStorage`` on PostgreSQL: one summary checkpoint per key, and leases.

A checkpoint is a row of ``<table>_checkpoints`` (never a row of the messages table, so
``fetch`` and ``fetch_all_chats`` never see it), and each version of it a row of
``<table>_cp_versions``, written in the same transaction. Compare-and-set runs in one transaction
under the key's row lock (the lock every writer of the key takes): the epoch, ``covers_to``
and the current version are read after the lock is granted, so two workers can never both
win. A lease is a row of ``<table>_leases`` with an expiry: taken by one conditional upsert,
lost by a worker that dies holding it once the ttl has passed.

A checkpoint row whose record does not decode (bad JSON, the wrong shape, a message that
does not decode, another format version) is derived data: ``load_checkpoint`` logs it once,
counts it in ``corrupt_derived`` and returns ``None``, while the head still reports its
version, so the next compare-and-set replaces it.
"""

from __future__ import annotations

from datetime import datetime

import attrs

from storage.abilities import SummaryCheckpoint
from storage.errors import CorruptRecordError
from storage.message import ChatKey
from storage.stores.payloads import decode_checkpoint, encode_checkpoint
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.text import escape_column, key_args

__all__ = ["acquire_lease", "load", "load_version", "release_lease", "save"]


async def load(ctx: PostgresContext, key: ChatKey) -> SummaryCheckpoint | None:
    """The key's checkpoint, or ``None`` (also when it belongs to an older epoch, or cannot
    be read: then reported)."""
    args = key_args(key)
    pool = ctx.current or await ctx.pool()
    row = await pool.fetchrow(ctx.sql.load_checkpoint, *args)
    if row is None:
        return None
    version, epoch, covers_to, created_at, record = row
    try:
        return decode_checkpoint(
            record, version=version, epoch=epoch, covers_to=covers_to, created_at=created_at
        )
    except CorruptRecordError as exc:
        ctx.unusable("checkpoint", key, exc)
        return None


async def save(
    ctx: PostgresContext, key: ChatKey, checkpoint: SummaryCheckpoint, expected: int
) -> SummaryCheckpoint | None:
    """Compare-and-set in one transaction under the key's row lock."""
    args = key_args(key)
    if "\x00" in checkpoint.epoch:
        return None  # no epoch the store makes holds NUL
    stored = attrs.evolve(checkpoint, version=expected + 1)
    record = encode_checkpoint(stored)
    pool = ctx.current or await ctx.pool()
    async with pool.acquire() as conn, conn.transaction():
        epoch = await conn.fetchval(ctx.sql.lock_key, *args)
        if epoch != checkpoint.epoch:
            return None
        row = await conn.fetchrow(ctx.sql.checkpoint_state, *args, checkpoint.covers_to, epoch)
        assert row is not None
        holds, current = row[0], row[1] or 0
        if not holds or current != expected:
            return None
        columns = (stored.version, stored.epoch, stored.covers_to, stored.created_at, record)
        await conn.execute(ctx.sql.upsert_checkpoint, *args, *columns)
        await conn.execute(ctx.sql.copy_version, *args, *columns)
    return stored


async def load_version(
    ctx: PostgresContext, key: ChatKey, version: int
) -> SummaryCheckpoint | None:
    """Version ``version`` of the key's checkpoint as kept, or ``None`` (an unreadable one
    reported and ignored)."""
    args = key_args(key)
    pool = ctx.current or await ctx.pool()
    row = await pool.fetchrow(ctx.sql.load_version, *args, version)
    if row is None:
        return None
    version, epoch, covers_to, created_at, record = row
    try:
        return decode_checkpoint(
            record, version=version, epoch=epoch, covers_to=covers_to, created_at=created_at
        )
    except CorruptRecordError as exc:
        ctx.unusable("checkpoint version", key, exc)
        return None


async def acquire_lease(
    ctx: PostgresContext, key: ChatKey, owner: str, ttl: float, now: datetime | None
) -> bool:
    """One conditional upsert; expiry on ``now`` (``None``: the server's clock)."""
    args = key_args(key)
    pool = ctx.current or await ctx.pool()
    won = await pool.fetchval(ctx.sql.acquire_lease, *args, escape_column(owner), ttl, now)
    return won is not None


async def release_lease(ctx: PostgresContext, key: ChatKey, owner: str) -> None:
    """Drop the lease if ``owner`` holds it."""
    args = key_args(key)
    pool = ctx.current or await ctx.pool()
    await pool.execute(ctx.sql.release_lease, *args, escape_column(owner))
