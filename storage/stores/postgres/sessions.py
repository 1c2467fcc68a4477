"""``SessionListing`` on PostgreSQL: a user's sessions from ``<table>_sessions``.

One summary row per session (agents, message count, first and last ``created_at``), kept by
the write functions in the same transaction as the messages, and read through the index
``(user_id, last_at DESC, session_id)``: a page costs the same whatever the number of
messages, and the keyset cursor (``last_at <= cursor's``) is an index range. ``last_at`` is
the session's last activity: deleting some of its messages keeps it (:mod:`.writes`), so a session
never moves behind a cursor that passed it.

Each page first checks the user's session rows against the key rows (how many sessions and
messages: the user's rows of two primary keys); when they disagree, both are rebuilt from
the messages (:mod:`.derived`).
"""

from __future__ import annotations

from datetime import timedelta

from storage.abilities import SessionInfo, SessionPage, encode_session_cursor
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.derived import rebuild_user, sessions_consistent
from storage.stores.postgres.text import utf8_part
from storage.stores.times import EPOCH

__all__ = ["list_sessions"]


async def list_sessions(
    ctx: PostgresContext, user_id: str, limit: int, after: tuple[int, str] | None
) -> SessionPage:
    """A page of the user's sessions (ties by ``session_id`` in code point order)."""
    user = utf8_part("user_id", user_id)
    pool = await ctx.pool()
    if not await sessions_consistent(ctx, user):
        await rebuild_user(ctx, user)
    if after is None:
        rows = await pool.fetch(ctx.sql.list_sessions, user, limit + 1)
    else:
        at = EPOCH + timedelta(microseconds=after[0])
        rows = await pool.fetch(ctx.sql.list_sessions_after, user, limit + 1, at, after[1])
    sessions = tuple(
        SessionInfo(session_id, tuple(sorted(agents)), int(count), first_at, last_at)
        for session_id, agents, count, first_at, last_at in rows[:limit]
    )
    more = len(rows) > limit
    last = sessions[-1] if sessions else None
    next_cursor = encode_session_cursor(last.last_at, last.session_id) if more and last else None
    return SessionPage(sessions, next_cursor)
