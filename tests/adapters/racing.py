"""Layers that let another worker append while an adapter edits the record: right after it
reads the record, or right before its ``replace`` reaches the store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

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
from storage.message import ChatKey, ChatMessage
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


class AppendsBeforeReplace(ChatStorageWrapper):
    """Runs ``interloper`` right before a ``replace`` goes down to the store, ``times``
    times: another worker's append landing after an edit read the record and checked its
    version, in the window only the store's compare-and-replace closes."""

    abilities = Abilities(
        passes=(ListableStorage, RecordStorage, SequencedStorage),
        transforms=(DescribableStorage, ReplaceableStorage),
        hides=tuple(
            a
            for a in ABILITIES
            if a
            not in (
                ListableStorage,
                RecordStorage,
                SequencedStorage,
                DescribableStorage,
                ReplaceableStorage,
            )
        ),
    )
    save_messages_if = forward(ReplaceableStorage.save_messages_if)

    def __init__(
        self, inner: ChatStorage, interloper: Callable[[], Awaitable[None]], times: int = 1
    ) -> None:
        super().__init__(inner)
        self.interloper = interloper
        self.times = times

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        if self.times:
            self.times -= 1
            await self.interloper()
        return await super().replace(key, messages, expected_version=expected_version)


class SavesAfterFetch(AppendsAfterRead):
    """Runs ``interloper`` right after a ``fetch`` (not a ``fetch_since``), ``times`` times:
    another worker's save landing between a check on what an adapter read and its save."""

    fetch_since = forward(SequencedStorage.fetch_since)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        messages = await super().fetch(key, limit=limit)
        if self.times:
            self.times -= 1
            await self.interloper()
        return messages
