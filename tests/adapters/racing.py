"""A layer that lets another worker append right after an adapter reads the record."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from storage.abilities import (
    ABILITIES,
    Abilities,
    DescribableStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    SequencedStorage,
    Tail,
    forward,
)
from storage.message import ChatKey
from storage.protocol import ChatStorage, ChatStorageWrapper

_OFFERED = (ListableStorage, ReplaceableStorage, RecordStorage)


class AppendsAfterRead(ChatStorageWrapper):
    """Runs ``interloper`` right after the record is read, ``times`` times: another worker's
    append landing between an edit's read and its write."""

    abilities = Abilities(
        passes=_OFFERED,
        transforms=(DescribableStorage, SequencedStorage),
        hides=tuple(
            a for a in ABILITIES if a not in (*_OFFERED, DescribableStorage, SequencedStorage)
        ),
    )
    head = forward(SequencedStorage.head)

    def __init__(
        self, inner: ChatStorage, interloper: Callable[[], Awaitable[None]], times: int = 1
    ) -> None:
        super().__init__(inner)
        self.interloper = interloper
        self.times = times

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        tail = await super().fetch_since(key, after)
        if self.times:
            self.times -= 1
            await self.interloper()
        return tail
