"""``list_sessions`` of the SQLite store: a range read of the ``sessions_by_activity`` index
(keyset pagination, newest activity first), never a scan of messages."""

from __future__ import annotations

import sqlite3
from typing import Final

from storage.abilities import SessionInfo, SessionPage, encode_session_cursor
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
_CHUNK: Final = 500  # bound parameters per agents query


def page(
    conn: sqlite3.Connection, user_id: str, limit: int, after: tuple[int, str] | None
) -> SessionPage:
    """One page of ``user_id``'s sessions after the decoded cursor ``after``."""
    if after is None:
        rows = conn.execute(FIRST_PAGE, (user_id, limit + 1)).fetchall()
    else:
        us, session = after
        rows = conn.execute(NEXT_PAGE, (user_id, us, us, session, limit + 1)).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
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
    sessions = tuple(
        SessionInfo(
            session_id, tuple(agents.get(session_id, ())), count, from_us(first), from_us(last)
        )
        for session_id, count, first, last in rows
    )
    next_cursor = None
    if more and sessions:
        last_info = sessions[-1]
        next_cursor = encode_session_cursor(last_info.last_at, last_info.session_id)
    return SessionPage(sessions, next_cursor)
