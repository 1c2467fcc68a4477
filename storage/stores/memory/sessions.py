"""Session listing of the memory store: a user's sessions gathered from their messages."""

from __future__ import annotations

from datetime import datetime

from storage.abilities import SessionInfo
from storage.stores.memory.conversation import Conversation

__all__ = ["session_infos"]


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
