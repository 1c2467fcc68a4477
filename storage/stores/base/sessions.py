"""The ``SessionListing`` template, and the page of a listing walk every store builds.

A walk (a first page, then its cursors) is ordered by each session's activity up to the
walk's *bound*, the newest activity its first page saw (carried in every cursor). A session
untouched since is where its ``last_at`` puts it; one saved to since ("moved": ``last_at``
past the bound) is placed by its newest message at or before the bound, the place it had when
the walk began, so it is neither skipped (it moved ahead of the cursor) nor listed twice.
Stores give :func:`walk_page` the sessions not moved (``last_at`` <= bound, the fast path:
their own index range) and the moved ones with their walk positions (:func:`walk_position`).
"""

from __future__ import annotations

from collections.abc import Iterable

from storage.abilities import SessionInfo, SessionPage, encode_session_cursor
from storage.message import check_key_part
from storage.stores.base.core import MaybeAwaitable, StoreCore
from storage.stores.checks import check_cursor, check_page_limit
from storage.stores.times import from_us, to_us

__all__ = ["SessionsTemplate", "page_of", "walk_page", "walk_position", "walk_rows"]

Row = tuple[int, SessionInfo]


def walk_position(times: Iterable[int], bound: int, first_us: int) -> int:
    """Where a moved session stands in a walk bounded by ``bound``: the newest of ``times``
    (its messages' ``created_at`` and any remembered activity, µs) at or before the bound;
    when none is (every message newer: made during the walk, or stamped ahead of the
    clock), its oldest message's time, which stays put while the walk pages."""
    return max((t for t in times if t <= bound), default=first_us)


def walk_page(
    stable: Iterable[SessionInfo],
    moved: Iterable[Row],
    limit: int,
    after: tuple[int, str] | None,
    bound: int | None,
) -> SessionPage:
    """The page after ``after`` of a walk bounded by ``bound`` (``None``: a first page, which
    lists by ``last_at`` and bounds the walk at its newest session).

    Args:
        stable: sessions with ``last_at`` <= ``bound`` (every one, or the first
            ``limit + 1`` after the cursor), any order.
        moved: ``(walk position, info)`` of sessions with ``last_at`` > ``bound``.
    """
    return walk_rows([(to_us(s.last_at), s) for s in stable], moved, limit, after, bound)


def walk_rows(
    rows: list[Row],
    moved: Iterable[Row],
    limit: int,
    after: tuple[int, str] | None,
    bound: int | None,
) -> SessionPage:
    """:func:`walk_page` of ``(position, info)`` rows (a store whose index time is the
    position: Redis)."""
    legacy = bound is None and after is not None  # an older release's cursor: no bound
    if bound is None and after is None:
        bound = max((us for us, _ in rows), default=None)
    rows += moved
    rows.sort(key=lambda r: (-r[0], r[1].session_id))
    if after is not None:
        rows = [r for r in rows if (-r[0], r[1].session_id) > (-after[0], after[1])]
    page = rows[:limit]
    next_cursor = None
    if len(rows) > limit:
        at, info = page[-1]
        walk = None if legacy or bound is None else from_us(bound)
        next_cursor = encode_session_cursor(from_us(at), info.session_id, walk)
    return SessionPage(tuple(info for _, info in page), next_cursor)


def page_of(
    sessions: Iterable[SessionInfo],
    limit: int,
    after: tuple[int, str] | None,
    bound: int | None,
    position: dict[str, int] | None = None,
) -> SessionPage:
    """The page of ``sessions`` (every session of the user, any order) after ``after``, for
    stores that gather them all (memory, JSONL). ``position``: the walk positions of the
    moved ones (``last_at`` past ``bound``); a moved session missing from it is left out."""
    stable: list[SessionInfo] = []
    moved: list[Row] = []
    for s in sessions:
        if bound is None or to_us(s.last_at) <= bound:
            stable.append(s)
        elif position is not None and s.session_id in position:
            moved.append((position[s.session_id], s))
    return walk_page(stable, moved, limit, after, bound)


class SessionsTemplate(StoreCore):
    """``list_sessions`` over the ``_list_sessions`` hook."""

    def _list_sessions(
        self, user_id: str, limit: int, after: tuple[int, str] | None, bound: int | None
    ) -> MaybeAwaitable[SessionPage]:
        """A page of the user's sessions (``limit`` >= 1, ``after`` a decoded cursor
        position, ``bound`` its walk's bound, ``None`` on a first page or an old cursor):
        :func:`walk_page`."""
        raise NotImplementedError

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """The user's sessions, newest activity first (``last_at`` desc, then
        ``session_id``), ``limit`` per page.

        ``last_at`` is the session's last activity: the newest ``created_at`` saved to it
        while it held messages. Deleting some of them (an agent's conversation, a purge)
        does not lower it, so a session never moves behind a cursor that passed it.
        A walk of the cursors lists every session that exists for the whole walk exactly
        once, also while other tasks and processes save to them: its pages keep the order
        of the walk's start (see the module; a session made during the walk may or may
        not be listed).

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: ``limit`` < 1 or a cursor this store did not make.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key_part("user_id", user_id)
        check_page_limit(limit)
        decoded = check_cursor(cursor)
        after = decoded[:2] if decoded is not None else None
        bound = decoded[2] if decoded is not None else None
        self._check_open()
        return await self._call(self._list_sessions, user_id, limit, after, bound)
