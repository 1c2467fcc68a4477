"""``search`` on Redis: a scan (:func:`storage.search.scan_search`) of the user's own
sessions, found in the user's index (never a pattern over other users' keys): one atomic
read per session, pipelined on a single server. Its cost grows with the user's messages, so
it suits interactive use over one user's history, not a search engine's load."""

from __future__ import annotations

from storage.abilities import SearchHit
from storage.codec import decode
from storage.message import ChatKey, ChatMessage
from storage.search import scan_search
from storage.stores.redis import scripts
from storage.stores.redis.context import RedisContext
from storage.stores.redis.layout import decode_part, entries, entry, known_part, part

__all__ = ["search"]


async def search(ctx: RedisContext, user_id: str, query: str, limit: int) -> list[SearchHit]:
    """The user's messages matching ``query``, best first."""
    user = part("user_id", user_id)
    members = await ctx.members(user_id)
    calls = []
    for member in members:
        base = ctx.layout.base(user, member)
        calls.append(([f"{base}a"], [base]))
    replies = await ctx.redis.eval_many(scripts.FETCH_SESSION, calls)
    # Oldest activity first, each session in save order: a tie goes to the later item.
    items: list[tuple[ChatKey, ChatMessage]] = []
    for member, reply in zip(members, replies, strict=True):
        session_id = decode_part(member)
        rows: list[tuple[int, ChatKey, bytes]] = []
        for n in range(0, len(reply), 2):
            agent_id = known_part(reply[n])
            if agent_id is None:
                ctx.unusable("session agents", f"session {member!r}", reply[n])
                continue
            key = ChatKey(user_id, session_id, agent_id)
            for raw in entries(reply[n + 1]):
                seq, record = entry(raw)
                rows.append((seq, key, record))
        rows.sort(key=lambda row: row[0])
        items += [(key, decode(record)) for _, key, record in rows]
    return scan_search(query, items, limit=limit)
