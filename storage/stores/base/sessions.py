"""The ``SessionListing`` template, and the keyset page every scanning store builds."""

from __future__ import annotations

from collections.abc import Iterable

from storage.abilities import SessionInfo, SessionPage, encode_session_cursor
from storage.message import check_key_part
from storage.stores.base.core import MaybeAwaitable, StoreCore
from storage.stores.checks import check_cursor, check_page_limit
from storage.stores.times import to_us

__all__ = ["SessionsTemplate", "page_of"]


def page_of(
    sessions: Iterable[SessionInfo], limit: int, after: tuple[int, str] | None
) -> SessionPage:
    """The page of ``sessions`` (any order) after the cursor ``after`` (``(last_at µs,
    session_id)``): newest ``last_at`` first, ties by ``session_id``; for stores that gather
    every session of the user (memory, JSONL)."""
    rows = sorted(((to_us(s.last_at), s) for s in sessions), key=lambda r: (-r[0], r[1].session_id))
    if after is not None:
        rows = [r for r in rows if (-r[0], r[1].session_id) > (-after[0], after[1])]
    page = rows[:limit]
    next_cursor = None
    if len(rows) > limit:
        last = page[-1][1]
        next_cursor = encode_session_cursor(last.last_at, last.session_id)
    return SessionPage(tuple(info for _, info in page), next_cursor)


class SessionsTemplate(StoreCore):
    """``list_sessions`` over the ``_list_sessions`` hook."""

    def _list_sessions(
        self, user_id: str, limit: int, after: tuple[int, str] | None
    ) -> MaybeAwaitable[SessionPage]:
        """A page of the user's sessions (``limit`` >= 1, ``after`` a decoded cursor)."""
        raise NotImplementedError

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """The user's sessions, newest activity first (``last_at`` desc, then
        ``session_id``), ``limit`` per page.

        ``last_at`` is the session's last activity: the newest ``created_at`` saved to it
        while it held messages. Deleting some of them (an agent's conversation, a purge)
        does not lower it, so a session never moves behind a cursor that already passed it.
        Cursors are keysets (:func:`storage.abilities.encode_session_cursor`).

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: ``limit`` < 1 or a cursor this store did not make.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key_part("user_id", user_id)
        check_page_limit(limit)
        after = check_cursor(cursor)
        self._check_open()
        return await self._call(self._list_sessions, user_id, limit, after)
