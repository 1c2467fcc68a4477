"""Erasure and writes of one user, serialized within a process.

Writes of a user share the user's gate; ``delete_user`` holds it alone: it waits for the
writes in flight to finish (their messages are then erased with the rest) and keeps new ones
waiting until the data key is destroyed and the data deleted (they then seal under a new
key). Across processes the layer checks the key again after each write instead
(:mod:`.layer`). A write costs two dict operations here; nothing waits unless an erasure of
that very user runs.
"""

from __future__ import annotations

import anyio

__all__ = ["UserGate"]


class UserGate:
    """Per-user write counts and erasures in progress (this process only)."""

    __slots__ = ("_drained", "_erasing", "_writers")

    def __init__(self) -> None:
        self._writers: dict[str, int] = {}
        self._erasing: dict[str, anyio.Event] = {}
        self._drained: dict[str, anyio.Event] = {}

    def try_enter(self, user_id: str) -> bool:
        """Start a write of ``user_id`` unless the user is being erased (then ``False``:
        await :meth:`enter`)."""
        if user_id in self._erasing:
            return False
        self._writers[user_id] = self._writers.get(user_id, 0) + 1
        return True

    async def enter(self, user_id: str) -> None:
        """Start a write of ``user_id`` (waits while the user is being erased)."""
        while (erasing := self._erasing.get(user_id)) is not None:
            await erasing.wait()
        self._writers[user_id] = self._writers.get(user_id, 0) + 1

    def leave(self, user_id: str) -> None:
        """End a write started by :meth:`enter`."""
        left = self._writers[user_id] - 1
        if left:
            self._writers[user_id] = left
            return
        del self._writers[user_id]
        drained = self._drained.pop(user_id, None)
        if drained is not None:
            drained.set()

    async def begin_erasure(self, user_id: str) -> None:
        """Hold ``user_id`` alone: wait for other erasures and the writes in flight."""
        while (erasing := self._erasing.get(user_id)) is not None:
            await erasing.wait()
        self._erasing[user_id] = anyio.Event()
        try:
            while user_id in self._writers:
                drained = self._drained.setdefault(user_id, anyio.Event())
                await drained.wait()
        except BaseException:
            self.end_erasure(user_id)
            raise

    def end_erasure(self, user_id: str) -> None:
        """Let the user's writes in again."""
        erasing = self._erasing.pop(user_id, None)
        if erasing is not None:
            erasing.set()
