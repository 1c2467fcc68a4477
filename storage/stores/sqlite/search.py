"""``search`` on the SQLite store: FTS5 (BM25) over the index of :mod:`.fts`, brought up to
date first (messages saved since the last search are indexed then, so saves pay nothing)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from storage.abilities import SearchHit
from storage.codec import DecodeCache
from storage.message import ChatKey
from storage.search import make_snippet, message_search_text
from storage.stores.sqlite import fts
from storage.stores.sqlite.rewrite import index_repaired
from storage.stores.sqlite.writes import transaction

__all__ = ["search"]

Unusable = Callable[[str, object, object], None]


def search(
    conn: sqlite3.Connection,
    cache: DecodeCache,
    user_id: str,
    terms: list[str],
    limit: int,
    unusable: Unusable,
) -> list[SearchHit]:
    """The user's messages holding any of ``terms``, best first (ties: the newer message)."""

    def rows() -> list[tuple[int, str, str, str, float]]:
        if not fts.mark_valid(conn):  # the mark cannot be right: index everything again
            unusable("search index", "the database", "impossible index mark")
            with transaction(conn):
                fts.reset(conn)
        while fts.stale(conn):  # index what was saved since the last search
            with transaction(conn):
                fts.catch_up(conn)
        return fts.search(conn, user_id, terms, limit)

    found = index_repaired(conn, rows, unusable)
    wanted = set(terms)
    hits = []
    messages = cache.decode_rows((row[0], row[3]) for row in found)
    for (_, session_id, agent_id, _, score), message in zip(found, messages, strict=True):
        snippet = make_snippet(message_search_text(message), wanted)
        hits.append(SearchHit(ChatKey(user_id, session_id, agent_id), message, snippet, -score))
    return hits
