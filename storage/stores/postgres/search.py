"""``SearchableStorage`` on PostgreSQL: full-text search over one user's messages.

Each message row holds a ``tsvector`` of its searchable words (``storage.search``'s
normalized words: case- and accent-insensitive, the ``simple`` configuration, no stemming,
so every language is treated alike; each word passed as a lexeme the parser keeps whole,
:func:`storage.stores.postgres.text.search_term`, so words match exactly as on every other
store), indexed by GIN. A query matches a message holding any of
its words (as on every store); it is given to ``websearch_to_tsquery`` as quoted words joined
by ``or``, so no user input can raise a syntax error. Hits are ranked by ``ts_rank``, newer
first on ties; the snippet is :func:`storage.search.make_snippet`'s, the same on every store.
"""

from __future__ import annotations

from storage.abilities import SearchHit
from storage.codec import decode
from storage.message import ChatKey
from storage.search import make_snippet, message_search_text
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.text import search_term, utf8_part

__all__ = ["search"]


async def search(
    ctx: PostgresContext, user_id: str, terms: list[str], limit: int
) -> list[SearchHit]:
    """Messages of ``user_id`` holding any of ``terms``, best first (``ts_rank``)."""
    user = utf8_part("user_id", user_id)
    websearch = " or ".join(f'"{search_term(term)}"' for term in terms)
    pool = await ctx.pool()
    rows = await pool.fetch(ctx.sql.search, user, websearch, limit)
    wanted = set(terms)
    hits: list[SearchHit] = []
    for session_id, agent_id, record, rank in rows:
        message = decode(record)
        snippet = make_snippet(message_search_text(message), wanted)
        hits.append(
            SearchHit(ChatKey(user_id, session_id, agent_id), message, snippet, float(rank))
        )
    return hits
