"""Reads of the Redis store: ``fetch`` (one script: an ``LRANGE`` joined in one string),
heads (one ``HMGET``), tails (one script), a session's rows and the keys it holds."""

from __future__ import annotations

import json
from typing import Any, cast

from storage.abilities import Head, Rewind, Tail, Timeline, mark_rewound
from storage.codec import decode
from storage.errors import CorruptRecordError
from storage.history import drop_orphaned_results
from storage.message import ChatKey, ChatMessage
from storage.stores.base import EMPTY_HEAD, SessionRow
from storage.stores.redis import scripts
from storage.stores.redis.context import RedisContext
from storage.stores.redis.layout import decode_part, entries, entry, known_part, part
from storage.stores.redis.writes import repair_head

__all__ = [
    "agents_of",
    "fetch",
    "fetch_since",
    "head",
    "list_keys",
    "rewinds_of",
    "rewound_of",
    "session_rows",
    "timeline",
]


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


def agents_of(
    ctx: RedisContext, member: str, reply: list[Any]
) -> list[tuple[str, list[tuple[int, ChatMessage]]]]:
    """``(agent_id, [(seq, message)])`` of a :data:`~.scripts.FETCH_SESSION` reply, rewound
    messages included and marked, each agent's in store order."""
    out = []
    for n in range(0, len(reply), 4):
        agent = known_part(reply[n])
        if agent is None:  # a damaged member of the session's agents set
            ctx.unusable("session agents", f"session {member!r}", reply[n])
            continue
        rewinds = {r.seq: r for r in rewinds_of(reply[n + 3])}
        rows = [(seq, decode(record)) for seq, record in map(entry, entries(reply[n + 1]))]
        for seq, rewind_seq, record in rewound_of(reply[n + 2]):
            message = decode(record)
            rewind = rewinds.get(rewind_seq)
            rows.append((seq, message if rewind is None else mark_rewound(message, rewind)))
        rows.sort(key=lambda row: row[0])
        out.append((agent, rows))
    return out


def rewound_of(joined: bytes) -> list[tuple[int, int, bytes]]:
    """``(seq, rewind seq, record)`` of each rewound entry (``"SEQ REWIND_SEQ RECORD"``).

    Raises:
        CorruptRecordError: an entry is malformed.
    """
    out = []
    for raw in entries(joined):
        seq, rest = entry(raw)
        rewind_seq, record = entry(rest)
        out.append((seq, rewind_seq, record))
    return out


def rewinds_of(joined: bytes) -> list[Rewind]:
    """The rewinds of a key's rewinds list (``"SEQ JSON"`` each), oldest first.

    Raises:
        CorruptRecordError: an entry is malformed.
    """
    out = []
    for raw in entries(joined):
        seq, data = entry(raw)
        try:
            out.append(Rewind.from_json({**json.loads(data), "seq": seq}))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRecordError(f"malformed Redis rewind entry {raw[:80]!r}") from exc
    return out


async def session_rows(ctx: RedisContext, user_id: str, session_id: str) -> list[SessionRow]:
    """Every message of the session with its sequence number and agent (rewound ones
    marked)."""
    base, member = ctx.layout.session_base(user_id, session_id)
    reply = await ctx.redis.eval(scripts.FETCH_SESSION, [f"{base}a"], [base])
    rows: list[SessionRow] = []
    for agent_id, messages in agents_of(ctx, member, reply):
        for seq, message in messages:
            assert message.created_at is not None
            rows.append((message.created_at, seq, agent_id, message))
    return rows


async def timeline(ctx: RedisContext, key: ChatKey) -> tuple[Timeline, bytes | None]:
    """The key's whole record and rewinds in one script, and its checkpoint's payload."""
    names = ctx.layout.key(key)
    keys = [names.messages, names.rewound, names.rewinds, names.head, names.checkpoint]
    reply = await ctx.redis.eval(scripts.TIMELINE, keys, [])
    if reply[7]:
        ctx.unusable("head", key, "lost or unreadable")
        await repair_head(ctx, key)
        reply = await ctx.redis.eval(scripts.TIMELINE, keys, [])
    epoch, last, version, joined, hidden, rewinds, checkpoint, _ = reply
    rows = [(seq, decode(record)) for seq, record in map(entry, entries(joined))]
    rows += [(seq, decode(record)) for seq, _, record in rewound_of(hidden)]
    rows.sort(key=lambda row: row[0])
    head = _head(epoch, last, version)
    found = Timeline(head, [seq for seq, _ in rows], [m for _, m in rows], rewinds_of(rewinds))
    return found, checkpoint


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
