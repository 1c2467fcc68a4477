"""``SessionListing`` on PostgreSQL: a user's sessions from ``<table>_sessions``.

One summary row per session (agents, message count, first and last ``created_at``), kept by
the write functions in the same transaction as the messages, and read through the index
``(user_id, last_at DESC, session_id)``: a page costs the same whatever the number of
messages, and the keyset cursor (``last_at <= cursor's``) is an index range. ``last_at`` is
the session's last activity: deleting some of its messages keeps it (``core``), so a session
never moves behind a cursor that passed it.

Each page first checks the user's session rows against the key rows (how many sessions and
messages: the user's rows of two primary keys); when they disagree, both are rebuilt from
the messages (:mod:`.derived`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from storage.abilities import SessionInfo, SessionPage, encode_session_cursor
from storage.message import check_key_part
from storage.stores.checks import check_cursor, check_page_limit
from storage.stores.postgres.derived import DerivedMixin
from storage.stores.postgres.text import utf8_part

__all__ = ["SessionsMixin"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class SessionsMixin(DerivedMixin):
    """Session listing from the per-session summary table."""

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """The user's sessions, newest activity first (``last_at`` desc, ties by
        ``session_id`` ascending in code point order), ``limit`` per page.

        Raises:
            InvalidArgumentError: ``limit`` < 1 or a malformed ``cursor``.
            InvalidKeyError: ``user_id`` is not a valid key part.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        check_key_part("user_id", user_id)
        user = utf8_part("user_id", user_id)
        limit = check_page_limit(limit)
        after = check_cursor(cursor)
        pool = self._pool or await self._get_pool()
        if not await self._sessions_consistent(user):
            await self._rebuild_user(user)
        if after is None:
            rows = await pool.fetch(self._sql.list_sessions, user, limit + 1)
        else:
            at = _EPOCH + timedelta(microseconds=after[0])
            rows = await pool.fetch(self._sql.list_sessions_after, user, limit + 1, at, after[1])
        sessions = tuple(
            SessionInfo(session_id, tuple(sorted(agents)), int(count), first_at, last_at)
            for session_id, agents, count, first_at, last_at in rows[:limit]
        )
        more = len(rows) > limit
        last = sessions[-1] if sessions else None
        next_cursor = (
            encode_session_cursor(last.last_at, last.session_id) if more and last else None
        )
        return SessionPage(sessions, next_cursor)
