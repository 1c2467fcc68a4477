"""Layers that let another worker append while an adapter edits the record: right after it
reads the record, or right before its ``replace`` reaches the store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from storage.abilities import ForwardRecords, ForwardReplace, ForwardSequenced, Tail
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage, ChatStorageWrapper


class AppendsAfterRead(ForwardSequenced, ForwardReplace, ForwardRecords, ChatStorageWrapper):
    """Runs ``interloper`` right after the record is read, ``times`` times: another worker's
    append landing between an edit's read and its write."""

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


class AppendsBeforeReplace(ForwardSequenced, ForwardReplace, ForwardRecords, ChatStorageWrapper):
    """Runs ``interloper`` right before a ``replace`` goes down to the store, ``times``
    times: another worker's append landing after an edit read the record and checked its
    version, in the window only the store's compare-and-replace closes."""

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
