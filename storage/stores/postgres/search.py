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
from storage.message import ChatKey, check_key_part
from storage.search import check_search_args, make_snippet, message_search_text
from storage.stores.postgres.core import PostgresCore
from storage.stores.postgres.text import search_term, utf8_part

__all__ = ["SearchMixin"]


class SearchMixin(PostgresCore):
    """Full-text search (GIN index on the messages table, user-scoped)."""

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Messages of ``user_id`` holding any word of ``query``, best first (``ts_rank``);
        never another user's.

        Raises:
            InvalidArgumentError: a query holding no word, or ``limit`` < 1.
            InvalidKeyError: ``user_id`` is not a valid key part.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        check_key_part("user_id", user_id)
        user = utf8_part("user_id", user_id)
        terms = check_search_args(query, limit)
        websearch = " or ".join(f'"{search_term(term)}"' for term in terms)
        pool = self._pool or await self._get_pool()
        rows = await pool.fetch(self._sql.search, user, websearch, limit)
        wanted = set(terms)
        hits: list[SearchHit] = []
        for session_id, agent_id, record, rank in rows:
            message = decode(record)
            hits.append(
                SearchHit(
                    ChatKey(user_id, session_id, agent_id),
                    message,
                    make_snippet(message_search_text(message), wanted),
                    float(rank),
                )
            )
        return hits
