"""``KeyedLocks``: one ``anyio.Lock`` per key within a process, dropped when nobody holds or
waits on it (so a long-lived store or layer keeps no lock per key it ever saw)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import anyio

__all__ = ["KeyedLocks"]

K = TypeVar("K", bound=Hashable)


class KeyedLocks(Generic[K]):
    """The in-process lock of each key."""

    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: dict[K, tuple[anyio.Lock, list[int]]] = {}  # lock, holders and waiters

    @asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        """Hold the lock of ``key``."""
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = (anyio.Lock(), [0])
        entry[1][0] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1][0] -= 1
            if not entry[1][0]:
                del self._locks[key]
