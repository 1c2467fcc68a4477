"""``ListableStorage``: the optional ability to enumerate stored conversations.

``ChatStorage`` has no listing method (an orchestrator always knows its keys). Export, import
checks and statistics need one, so base stores that can enumerate their keys cheaply also
implement this small protocol; layers do not forward it (keys are never transformed), so
:func:`find_listable` looks for it down a stack's ``.inner`` chain.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from storage.message import ChatKey

__all__ = ["ListableStorage", "find_listable"]


@runtime_checkable
class ListableStorage(Protocol):
    """A store that can list the keys it holds."""

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """Every key holding at least one message, sorted by (user_id, session_id, agent_id).

        Args:
            user_id: only this user's keys.
            session_id: only keys of this session (of any user unless ``user_id`` is given).

        Raises:
            InvalidKeyError: a filter is given but is not a valid key part.
            StorageUnavailableError: the backend cannot be reached.
        """
        ...


def find_listable(stack: object) -> ListableStorage | None:
    """The outermost component of ``stack`` (following ``.inner``) that can list keys."""
    current: object | None = stack
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ListableStorage):
            return current
        current = getattr(current, "inner", None)
    return None
