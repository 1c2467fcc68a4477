"""``search`` on Redis: a scan (:func:`storage.search.scan_search`) of the user's own
sessions, found in the user's index (never a pattern over other users' keys): one atomic
read per session, pipelined on a single server. Its cost grows with the user's messages, so
it suits interactive use over one user's history, not a search engine's load."""

from __future__ import annotations

from storage.abilities import SearchHit
from storage.message import ChatKey, ChatMessage
from storage.search import scan_search
from storage.stores.redis import scripts
from storage.stores.redis.context import RedisContext
from storage.stores.redis.layout import decode_part, part
from storage.stores.redis.reads import agents_of

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
    # Rewound messages are searched too: they are still the user's record.
    items: list[tuple[ChatKey, ChatMessage]] = []
    for member, reply in zip(members, replies, strict=True):
        session_id = decode_part(member)
        rows: list[tuple[int, ChatKey, ChatMessage]] = []
        for agent_id, messages in agents_of(ctx, member, reply):
            key = ChatKey(user_id, session_id, agent_id)
            rows += [(seq, key, message) for seq, message in messages]
        rows.sort(key=lambda row: row[0])
        items += [(key, message) for _, key, message in rows]
    return scan_search(query, items, limit=limit)
