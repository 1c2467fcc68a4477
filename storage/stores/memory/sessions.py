"""Session listing of the memory store: a user's sessions gathered from their messages."""

from __future__ import annotations

from datetime import datetime

from storage.abilities import SessionInfo
from storage.stores.base.sessions import walk_position
from storage.stores.memory.conversation import Conversation
from storage.stores.times import to_us

__all__ = ["session_infos", "walk_positions"]


def session_infos(
    user_id: str,
    sessions: dict[str, dict[str, Conversation]],
    activity: dict[tuple[str, str], datetime],
) -> list[SessionInfo]:
    """One :class:`SessionInfo` per session of ``user_id`` holding a message; ``last_at``
    is the later of its newest message and its remembered last activity (``activity``, by
    ``(user_id, session_id)``)."""
    infos = []
    for session_id, agents in sessions.items():
        times = [
            m.created_at
            for conversation in agents.values()
            for m in conversation.messages
            if m.created_at is not None
        ]
        if not times:
            continue
        newest = max(times)
        active = activity.get((user_id, session_id))
        infos.append(
            SessionInfo(
                session_id,
                tuple(sorted(a for a, c in agents.items() if c.messages)),
                len(times),
                min(times),
                active if active is not None and active > newest else newest,
            )
        )
    return infos


def walk_positions(
    user_id: str,
    sessions: dict[str, dict[str, Conversation]],
    activity: dict[tuple[str, str], datetime],
    moved: list[SessionInfo],
    bound: int,
) -> dict[str, int]:
    """The walk positions of the ``moved`` sessions (``last_at`` past ``bound``): their
    newest activity up to it (:func:`storage.stores.base.sessions.walk_position`)."""
    out = {}
    for info in moved:
        times = [
            to_us(m.created_at)
            for conversation in sessions.get(info.session_id, {}).values()
            for m in conversation.messages
            if m.created_at is not None
        ]
        active = activity.get((user_id, info.session_id))
        if active is not None:
            times.append(to_us(active))
        out[info.session_id] = walk_position(times, bound, to_us(info.first_at))
    return out
