"""Reads of the Redis store: ``fetch`` (one script: an ``LRANGE`` joined in one string),
heads (one ``HMGET``), tails (one script), a session's rows and the keys it holds."""

from __future__ import annotations

from typing import cast

from storage.abilities import Head, Tail
from storage.codec import decode
from storage.history import drop_orphaned_results
from storage.message import ChatKey, ChatMessage
from storage.stores.base import EMPTY_HEAD, SessionRow
from storage.stores.redis import scripts
from storage.stores.redis.context import RedisContext
from storage.stores.redis.layout import decode_part, entries, entry, known_part, part
from storage.stores.redis.writes import repair_head

__all__ = ["fetch", "fetch_since", "head", "list_keys", "session_entries", "session_rows"]


def _head(epoch: bytes | str, last: bytes | str, version: bytes | str) -> Head:
    """The head of a key's fields.

    Raises:
        ValueError: a field is not what the scripts write (the head must be rebuilt).
    """
    last_seq = int(last)
    if not last_seq:
        return EMPTY_HEAD
    text = epoch.decode("ascii") if isinstance(epoch, bytes) else epoch
    if not text:
        raise ValueError("a head without an epoch")
    return Head(last_seq, text, int(version))


async def fetch(ctx: RedisContext, key: ChatKey, limit: int | None) -> list[ChatMessage]:
    """The key's messages, oldest first (the newest ``limit``, tool-pair safe)."""
    names = ctx.layout.key(key)
    joined = await ctx.redis.eval(scripts.FETCH, [names.messages], [-limit if limit else 0])
    out = [decode(entry(raw)[1]) for raw in entries(joined)]
    return out if limit is None else drop_orphaned_results(out)


async def head(ctx: RedisContext, key: ChatKey) -> Head:
    """The key's head: one ``HMGET`` (a lost or unreadable one rebuilt from the list)."""
    names = ctx.layout.key(key)
    client = await ctx.redis.ready()
    epoch, last, version = await client.hmget(names.head, ["e", "l", "c"])
    try:
        found: Head | None = _head(epoch or b"", last or b"0", version or b"0")
    except ValueError:
        found = None
    # No head: a key holding nothing, or a lost head (one more read, for empty keys only).
    if found is not None and (found.last_seq or not await client.exists(names.messages)):
        return found
    ctx.unusable("head", key, "lost or unreadable")
    await repair_head(ctx, key)
    epoch, last, version = await client.hmget(names.head, ["e", "l", "c"])
    return _head(epoch or b"", last or b"0", version or b"0")


async def fetch_since(ctx: RedisContext, key: ChatKey, after: int) -> Tail:
    """Messages with ``seq > after`` and the head, in one script (one snapshot)."""
    names = ctx.layout.key(key)
    epoch, last, version, rows, broken = await ctx.redis.eval(
        scripts.FETCH_SINCE, [names.messages, names.head], [after]
    )
    if broken:
        ctx.unusable("head", key, "lost or unreadable")
        await repair_head(ctx, key)
        epoch, last, version, rows, _ = await ctx.redis.eval(
            scripts.FETCH_SINCE, [names.messages, names.head], [after]
        )
    seqs: list[int] = []
    messages: list[ChatMessage] = []
    for raw in entries(rows):
        seq, record = entry(raw)
        if seq > after:
            seqs.append(seq)
            messages.append(decode(record))
    return Tail(_head(epoch, last, version), tuple(seqs), tuple(messages))


async def session_entries(
    ctx: RedisContext, user_id: str, member: str
) -> list[tuple[str, list[bytes]]]:
    """``(agent_id, list entries)`` of every agent of one session (one atomic read)."""
    base = ctx.layout.base(part("user_id", user_id), member)
    reply = await ctx.redis.eval(scripts.FETCH_SESSION, [f"{base}a"], [base])
    out = []
    for n in range(0, len(reply), 2):
        agent = known_part(reply[n])
        if agent is None:  # a damaged member of the session's agents set
            ctx.unusable("session agents", f"session {member!r}", reply[n])
            continue
        out.append((agent, entries(reply[n + 1])))
    return out


async def session_rows(ctx: RedisContext, user_id: str, session_id: str) -> list[SessionRow]:
    """Every message of the session with its sequence number and agent."""
    _, member = ctx.layout.session_base(user_id, session_id)
    rows: list[SessionRow] = []
    for agent_id, rows_of_agent in await session_entries(ctx, user_id, member):
        for raw in rows_of_agent:
            seq, record = entry(raw)
            message = decode(record)
            assert message.created_at is not None
            rows.append((message.created_at, seq, agent_id, message))
    return rows


async def list_keys(
    ctx: RedisContext, user_id: str | None, session_id: str | None
) -> list[ChatKey]:
    """The keys holding a message: from the users' indexes (a ``SCAN`` for the index keys
    only when no user is given) and each session's agents."""
    layout = ctx.layout
    users: list[str] = []  # encoded
    client = await ctx.redis.ready()
    if user_id is not None:
        users.append(part("user_id", user_id))
    else:
        async for raw in client.scan_iter(match=layout.index_pattern(), count=1000, _type="zset"):
            users.append(layout.user_of_index(raw.decode("ascii")))
    wanted = None if session_id is None else part("session_id", session_id)
    keys: list[ChatKey] = []
    for user in users:
        x = f"{layout.prefix}:{{{user}}}:x"
        for raw_member in cast(list[bytes], await client.zrange(x, 0, -1)):
            if known_part(raw_member) is None:
                ctx.unusable("session index", f"user {user!r}", raw_member)
                continue
            member = raw_member.decode("ascii")
            if wanted is not None and member != wanted:
                continue
            base = layout.base(user, member)
            agents = await ctx.redis.eval(scripts.LIST_AGENTS, [f"{base}a"], [base])
            session = known_part(member)
            for agent in agents:
                agent_id = known_part(agent)
                if session is None or agent_id is None:
                    ctx.unusable("session agents", f"session {member!r}", agent)
                    continue
                keys.append(ChatKey(decode_part(user), session, agent_id))
    return keys
