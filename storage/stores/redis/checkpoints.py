"""Summary checkpoints and summarizing leases on Redis: each one script on the key's slot.

A checkpoint is a string beside the key's list (JSON, :mod:`storage.stores.payloads`), set by
a compare-and-set script that checks the head's checkpoint version, the epoch and that
``covers_to`` is a sequence number the list holds; the same script keeps it in the key's
versions hash, until a replace, a rebuilt head or an erasure drops them. A lease is
``"EXPIRY_MS OWNER"`` set with ``PX`` (a dead holder's lease never outlives ``ttl`` of server time).
"""

from __future__ import annotations

import attrs

from storage.abilities import SummaryCheckpoint
from storage.errors import CorruptRecordError
from storage.message import ChatKey
from storage.stores.payloads import decode_checkpoint, encode_checkpoint
from storage.stores.redis import scripts
from storage.stores.redis.context import RedisContext
from storage.stores.times import Clock

__all__ = ["acquire_lease", "load", "load_version", "release_lease", "save"]


async def load(ctx: RedisContext, key: ChatKey) -> SummaryCheckpoint | None:
    """The key's checkpoint of its current epoch, or ``None`` (an unreadable one reported
    and ignored)."""
    names = ctx.layout.key(key)
    epoch, raw = await ctx.redis.eval(scripts.LOAD_CHECKPOINT, [names.head, names.checkpoint], [])
    if not raw:
        return None
    try:
        checkpoint = decode_checkpoint(raw)
    except CorruptRecordError as exc:
        ctx.unusable("checkpoint", key, exc)
        return None
    if checkpoint.epoch != epoch.decode("ascii", "replace"):
        return None
    return checkpoint


async def save(
    ctx: RedisContext, key: ChatKey, checkpoint: SummaryCheckpoint, expected_version: int
) -> SummaryCheckpoint | None:
    """Compare-and-set in one script; the checkpoint as stored, or ``None``."""
    stored = attrs.evolve(checkpoint, version=expected_version + 1)
    names = ctx.layout.key(key)
    done = await ctx.redis.eval(
        scripts.SAVE_CHECKPOINT,
        [names.messages, names.head, names.checkpoint, names.versions],
        [
            expected_version,
            checkpoint.epoch,
            checkpoint.covers_to,
            encode_checkpoint(stored),
            ctx.ttl,
        ],
    )
    return stored if done else None


async def load_version(ctx: RedisContext, key: ChatKey, version: int) -> SummaryCheckpoint | None:
    """Version ``version`` of the key's checkpoint as kept (one ``HGET``), or ``None`` (an
    unreadable one reported and ignored)."""
    names = ctx.layout.key(key)
    client = await ctx.redis.ready()
    raw = await client.hget(names.versions, str(version))
    if not raw:
        return None
    try:
        return decode_checkpoint(raw)
    except CorruptRecordError as exc:
        ctx.unusable("checkpoint version", key, exc)
        return None


async def acquire_lease(
    ctx: RedisContext, key: ChatKey, owner: str, ttl: float, clock: Clock | None
) -> bool:
    """``SET PX`` in a script that refuses while another owner holds an unexpired lease, on
    ``clock`` (``None``: the server's clock, which every worker shares)."""
    names = ctx.layout.key(key)
    ms = max(int(ttl * 1000), 1)
    now = int(clock() * 1000) if clock is not None else -1
    return bool(await ctx.redis.eval(scripts.ACQUIRE_LEASE, [names.lease], [owner, ms, now]))


async def release_lease(ctx: RedisContext, key: ChatKey, owner: str) -> None:
    """Compare-and-delete in one script."""
    names = ctx.layout.key(key)
    await ctx.redis.eval(scripts.RELEASE_LEASE, [names.lease], [owner])
