"""``SequencedStorage`` on PostgreSQL: a key's head and its tail after a sequence number."""

from __future__ import annotations

from storage.abilities import Head, Tail
from storage.codec import decode
from storage.message import ChatKey
from storage.stores.base import EMPTY_HEAD
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.derived import repair_key
from storage.stores.postgres.text import key_args

__all__ = ["fetch_since", "head"]


def _head(last_seq: int, epoch: str, version: int) -> Head:
    # A key holding no message has no epoch (its row may exist for its records).
    return Head(int(last_seq), epoch, int(version)) if last_seq else EMPTY_HEAD


async def head(ctx: PostgresContext, key: ChatKey) -> Head:
    """The key's head in one query: the indexed ``max(key_seq)``, the epoch, and the
    checkpoint's version (0 when none, or when it belongs to an older epoch)."""
    args = key_args(key)
    pool = ctx.current or await ctx.pool()
    row = await pool.fetchrow(ctx.sql.head, *args)
    assert row is not None
    if row[0] and not row[1]:  # messages, but their key's row is lost: rebuild it
        await repair_key(ctx, key, "its key row is missing")
        row = await pool.fetchrow(ctx.sql.head, *args)
        assert row is not None
    return _head(row[0], row[1], row[2])


async def fetch_since(ctx: PostgresContext, key: ChatKey, after: int) -> Tail:
    """Messages with ``seq > after`` and the head, in one statement (one snapshot): an
    indexed range read on ``(user_id, session_id, agent_id, key_seq)``."""
    args = key_args(key)
    pool = ctx.current or await ctx.pool()
    for attempt in range(2):
        rows = await pool.fetch(ctx.sql.fetch_since, *args, after)
        found_head = EMPTY_HEAD
        found: list[tuple[int, str]] = []
        lost = False
        for seq, record, last_seq, epoch, version in rows:
            if seq is None:
                found_head = _head(last_seq, epoch, version)
                lost = bool(last_seq) and not epoch
            else:
                found.append((seq, record))
        if not lost or attempt:
            break
        await repair_key(ctx, key, "its key row is missing")
    found.sort(key=lambda row: row[0])  # in index order already: O(n)
    return Tail(
        found_head,
        tuple(seq for seq, _ in found),
        tuple(decode(record) for _, record in found),
    )
