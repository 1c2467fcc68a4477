"""``TransformingChatStorage``: rewrite (or drop) each message before the inner store sees it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias

from storage.history import prepare_batch
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage, ChatStorageWrapper

__all__ = ["MessageTransform", "TransformingChatStorage"]

MessageTransform: TypeAlias = Callable[
    [ChatMessage, ChatKey], "ChatMessage | Awaitable[ChatMessage | None] | None"
]


class TransformingChatStorage(ChatStorageWrapper):
    """Run ``transform(message, key)`` on every saved message before the inner store sees it.

    The transform may be sync or async. Returning ``None`` drops the message (it is absent
    from the result of ``save``). An exception raised by the transform propagates unchanged
    and nothing of the batch is stored: every message is transformed before the inner store
    is called. Fetches pass through.

    Args:
        inner: the wrapped store.
        transform: ``(message, key) -> ChatMessage | None`` (or an awaitable of it). It must
            keep the message ``id`` so a retried save stays idempotent.

    Raises:
        InvalidMessageError: a message is invalid (checked before the transform sees it).
    """

    def __init__(self, inner: ChatStorage, transform: MessageTransform) -> None:
        super().__init__(inner)
        self.transform = transform

    async def _apply(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        out: list[ChatMessage] = []
        for message in prepare_batch(messages):
            result = self.transform(message, key)
            if inspect.isawaitable(result):
                result = await result
            if result is not None:
                out.append(result)
        return out

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        transformed = await self._apply(key, [message])
        if not transformed:
            return []
        return await self.inner.save(key, transformed[0])

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        transformed = await self._apply(key, messages)
        if not transformed:
            return []
        return await self.inner.save_messages(key, transformed)

    def describe(self) -> str:
        own = getattr(self.transform, "describe", None)
        what = (
            own()
            if callable(own)
            else getattr(self.transform, "__name__", type(self.transform).__name__)
        )
        return f"TransformingChatStorage(transform={what})"
