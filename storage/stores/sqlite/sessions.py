"""``list_sessions`` of the SQLite store: a range read of the ``sessions_by_activity`` index
(keyset pagination, newest activity first).

A walk's later pages also read the sessions saved to since its first page (``last_us`` past
the cursor's bound, a second range of the index: empty unless someone wrote meanwhile) and
place each by its messages' times up to the bound (:mod:`storage.stores.base.sessions`):
only those sessions' messages are read.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from storage.abilities import SessionInfo, SessionPage
from storage.stores.base.sessions import walk_page, walk_position
from storage.stores.sqlite.writes import from_us

__all__ = ["FIRST_PAGE", "NEXT_PAGE", "page"]

_COLUMNS: Final = "session_id, message_count, first_us, last_us"
FIRST_PAGE: Final = (
    f"SELECT {_COLUMNS} FROM sessions WHERE user_id = ? ORDER BY last_us DESC, session_id LIMIT ?"
)
# After (us, session): older activity, or the same instant and a later session id. The
# ``last_us <= ?`` bound lets the index range start at the cursor.
NEXT_PAGE: Final = (
    f"SELECT {_COLUMNS} FROM sessions WHERE user_id = ? AND last_us <= ? "
    "AND (last_us < ? OR session_id > ?) ORDER BY last_us DESC, session_id LIMIT ?"
)
# Sessions saved to since the walk's first page (the index range past its bound).
_MOVED: Final = f"SELECT {_COLUMNS} FROM sessions WHERE user_id = ? AND last_us > ?"
_CHUNK: Final = 500  # bound parameters per agents query


def page(
    conn: sqlite3.Connection,
    user_id: str,
    limit: int,
    after: tuple[int, str] | None,
    bound: int | None,
) -> SessionPage:
    """One page of ``user_id``'s sessions after the decoded cursor ``after`` of a walk
    bounded by ``bound``."""
    if after is None:
        rows = conn.execute(FIRST_PAGE, (user_id, limit + 1)).fetchall()
    else:
        us, session = after
        rows = conn.execute(NEXT_PAGE, (user_id, us, us, session, limit + 1)).fetchall()
    moved = conn.execute(_MOVED, (user_id, bound)).fetchall() if bound is not None else []
    infos = _infos(conn, user_id, rows + moved)
    stable = [infos[row[0]] for row in rows]
    return walk_page(stable, _positions(conn, user_id, moved, bound, infos), limit, after, bound)


def _positions(
    conn: sqlite3.Connection,
    user_id: str,
    moved: list[tuple[str, int, int, int]],
    bound: int | None,
    infos: dict[str, SessionInfo],
) -> list[tuple[int, SessionInfo]]:
    """``(walk position, info)`` of the moved sessions: their messages' times up to the
    bound (a deletion's remembered activity is not in them: see ``docs/stores.md``)."""
    if bound is None or not moved:
        return []
    times: dict[str, list[int]] = {}
    for start in range(0, len(moved), _CHUNK):
        chunk = [row[0] for row in moved[start : start + _CHUNK]]
        marks = ", ".join("?" * len(chunk))
        for session_id, newest in conn.execute(
            "SELECT session_id, max(created_us) FROM messages WHERE user_id = ? "
            f"AND session_id IN ({marks}) AND created_us <= ? GROUP BY session_id",
            (user_id, *chunk, bound),
        ):
            times[session_id] = [newest]
    return [
        (walk_position(times.get(sid, ()), bound, first), infos[sid]) for sid, _, first, _ in moved
    ]


def _infos(
    conn: sqlite3.Connection, user_id: str, rows: list[tuple[str, int, int, int]]
) -> dict[str, SessionInfo]:
    """The infos of session rows, with their agents."""
    agents: dict[str, list[str]] = {}
    for start in range(0, len(rows), _CHUNK):
        chunk = [row[0] for row in rows[start : start + _CHUNK]]
        marks = ", ".join("?" * len(chunk))
        for session_id, agent_id in conn.execute(
            "SELECT session_id, agent_id FROM conversations WHERE user_id = ? "
            f"AND session_id IN ({marks}) ORDER BY session_id, agent_id",
            (user_id, *chunk),
        ):
            agents.setdefault(session_id, []).append(agent_id)
    return {
        session_id: SessionInfo(
            session_id, tuple(agents.get(session_id, ())), count, from_us(first), from_us(last)
        )
        for session_id, count, first, last in rows
    }
