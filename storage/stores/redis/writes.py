"""Writes of the Redis store: each one Lua script on the session's slot (:mod:`.scripts`),
with the user's session index updated around it on a Cluster (:class:`.context.
RedisContext`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from storage.codec import decode, encode
from storage.errors import ChatStorageError
from storage.message import ChatKey, ChatMessage
from storage.stores.base import conflict
from storage.stores.epochs import new_epoch
from storage.stores.redis import scripts
from storage.stores.redis.context import RedisContext
from storage.stores.redis.layout import entries, entry, part, to_us

__all__ = ["delete_key", "delete_user", "message_args", "repair_head", "replace", "save"]


def message_args(batch: Sequence[ChatMessage]) -> list[Any]:
    """``(id, record, created_at µs)`` per message, for the save and replace scripts."""
    args: list[Any] = []
    for message in batch:
        assert message.created_at is not None  # prepare_batch sets it
        args += [message.id, encode(message), to_us(message.created_at)]
    return args


def _newest(batch: Sequence[ChatMessage]) -> int:
    return max(to_us(m.created_at) for m in batch if m.created_at is not None)


async def save(
    ctx: RedisContext, key: ChatKey, batch: list[ChatMessage], expected_version: str
) -> list[ChatMessage]:
    """Append ``batch`` (non-empty) in one script, only while the key's version is
    ``expected_version`` (``""``: always); the messages newly stored.

    Raises:
        ConflictError: the key's version is not ``expected_version`` (nothing stored).
    """
    names = ctx.layout.key(key)
    keys = [*names.of(scripts.SAVE_KEYS), *ctx.index_keys(key.user_id)]
    args = [ctx.ttl, names.agent, new_epoch(), expected_version, names.member, names.base]
    args += message_args(batch)
    await ctx.register(key.user_id, names.member, _newest(batch))
    reply = await ctx.redis.eval(scripts.SAVE, keys, args)
    if reply[0] == 1:
        raise conflict(key, expected_version)
    _, stored, version, score, rebuilt = reply
    if version:
        await ctx.reindex(key.user_id, names.member, int(version), int(score), True)
    if rebuilt:
        ctx.unusable("head", key, "a lost or unreadable head or session counter")
        await repair_head(ctx, key)
    return [batch[index - 1] for index in stored]


async def repair_head(ctx: RedisContext, key: ChatKey) -> None:
    """Rebuild the key's head from its list (a new epoch: its checkpoint is void), when it
    was lost or does not parse; the entries are the truth."""
    names = ctx.layout.key(key)
    for _ in range(3):
        joined = await ctx.redis.eval(scripts.FETCH, [names.messages], [0])
        rows = entries(joined)
        last = entry(rows[-1])[0] if rows else 0
        times: list[int] = []
        for raw in rows:
            try:
                at = decode(entry(raw)[1]).created_at
            except ChatStorageError:  # the raw record's own damage: its time unknown
                continue
            if at is not None:
                times.append(to_us(at))
        first, newest = (min(times), max(times)) if times else (0, 0)
        done = await ctx.redis.eval(
            scripts.REPAIR_HEAD,
            [names.messages, names.head, names.checkpoint, names.session, names.versions],
            [len(rows), new_epoch(), last, len(rows), first, newest, names.agents, names.base],
        )
        if done:
            return


async def replace(
    ctx: RedisContext, key: ChatKey, batch: list[ChatMessage], expected_version: str | None
) -> None:
    """Replace the key's messages with ``batch`` in a new epoch, in one script that checks
    ``expected_version`` first (when given).

    Raises:
        ConflictError: the key's version is not ``expected_version`` (nothing changed).
    """
    if expected_version == "":
        raise conflict(key, expected_version)  # "" tells the script "no check"; no head has it
    names = ctx.layout.key(key)
    keys = [*names.of(scripts.REPLACE_KEYS), *ctx.index_keys(key.user_id)]
    args = [ctx.ttl, names.agent, new_epoch(), names.base, names.member, expected_version or ""]
    args += message_args(batch)
    if batch:
        await ctx.register(key.user_id, names.member, _newest(batch))
    reply = await ctx.redis.eval(scripts.REPLACE, keys, args)
    if reply[0] == 1:
        raise conflict(key, expected_version)
    _, version, score, exists = reply
    await ctx.reindex(key.user_id, names.member, int(version), int(score), bool(exists))


async def delete_key(ctx: RedisContext, key: ChatKey) -> None:
    """Erase every key of one conversation (and its index entry when the session empties)."""
    names = ctx.layout.key(key)
    keys = [*names.of(scripts.DELETE_KEYS), *ctx.index_keys(key.user_id)]
    version, score, exists = await ctx.redis.eval(
        scripts.DELETE, keys, [names.agent, names.base, names.member, ctx.ttl]
    )
    await ctx.reindex(key.user_id, names.member, int(version), int(score), bool(exists))


async def delete_user(ctx: RedisContext, user_id: str) -> None:
    """Erase every session in the user's index (and of the layout before the index)."""
    encoded_user = part("user_id", user_id)
    # The layout before the index kept a user's sessions in the SET "P:{U}:s": erase
    # those too, so data written by an older release is never left behind.
    legacy = f"{ctx.layout.prefix}:{{{encoded_user}}}:s"
    client = await ctx.redis.ready()
    old = {m.decode("ascii") for m in cast(set[bytes], await client.smembers(legacy))}
    for member in sorted(set(await ctx.members(user_id)) | old):
        base = ctx.layout.base(encoded_user, member)
        version = await ctx.redis.eval(
            scripts.DELETE_SESSION,
            [f"{base}a", f"{base}s", *ctx.index_keys(user_id)],
            [base, member, ctx.ttl],
        )
        await ctx.reindex(user_id, member, int(version), 0, False)
    if old:
        await client.delete(legacy)
