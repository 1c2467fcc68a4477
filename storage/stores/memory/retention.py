"""Retention purges of the memory store."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from storage.purge import purge_mask
from storage.stores.memory.conversation import Users

__all__ = ["purge"]


def purge(users: Users, cutoff: datetime, forget_idle: Callable[[str, str], None]) -> int:
    """Remove messages created before ``cutoff``, widened by
    :func:`storage.purge.purge_mask` (whole tool groups, no orphaned answers at the front);
    each key touched starts a new epoch; ``forget_idle(user, session)`` after each session.
    Returns how many messages went."""
    removed = 0
    for user_id, sessions in users.items():
        for session_id, agents in sessions.items():
            for conversation in agents.values():
                old = [m.created_at is None or m.created_at < cutoff for m in conversation.messages]
                if not any(old):
                    continue
                drop, _ = purge_mask(conversation.messages, old)  # the whole record is here
                keep = [i for i, gone in enumerate(drop) if not gone]
                removed += len(conversation.messages) - len(keep)
                conversation.retain(keep)
            forget_idle(user_id, session_id)
    return removed
