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

A walk's later pages also read the sessions saved to since its first page (``last_at`` past
the cursor's bound: an empty index range unless someone wrote meanwhile) and place each by
its messages' times up to the bound (:mod:`storage.stores.base.sessions`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from storage.abilities import SessionInfo, SessionPage
from storage.stores.base.sessions import walk_page, walk_position
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.derived import rebuild_user, sessions_consistent
from storage.stores.postgres.text import utf8_part
from storage.stores.times import EPOCH, to_us

__all__ = ["list_sessions"]


async def list_sessions(
    ctx: PostgresContext,
    user_id: str,
    limit: int,
    after: tuple[int, str] | None,
    bound: int | None,
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
    stable = [_info(*row) for row in rows]
    moved: list[tuple[int, SessionInfo]] = []
    if bound is not None:
        limit_at = EPOCH + timedelta(microseconds=bound)
        found = [
            _info(*row) for row in await pool.fetch(ctx.sql.list_sessions_moved, user, limit_at)
        ]
        if found:
            ids = [s.session_id for s in found]
            times = {
                sid: to_us(newest)
                for sid, newest in await pool.fetch(ctx.sql.moved_times, user, ids, limit_at)
            }
            moved = [
                (
                    walk_position(
                        [times[s.session_id]] if s.session_id in times else [],
                        bound,
                        to_us(s.first_at),
                    ),
                    s,
                )
                for s in found
            ]
    return walk_page(stable, moved, limit, after, bound)


def _info(
    session_id: str, agents: list[str], count: int, first_at: datetime, last_at: datetime
) -> SessionInfo:
    return SessionInfo(session_id, tuple(sorted(agents)), int(count), first_at, last_at)
