"""``TransformingChatStorage``: rewrite (or drop) each message before the inner store sees it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias

import anyio
import anyio.to_thread
import attrs

from storage.abilities import (
    ForwardCheckpoints,
    ForwardRecords,
    ForwardReplace,
    ForwardRetention,
    ForwardSearch,
    ForwardSessions,
    SummaryCheckpoint,
)
from storage.errors import InvalidMessageError
from storage.history import prepare_batch, validate_history
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage, ChatStorageWrapper

__all__ = ["MessageTransform", "TransformingChatStorage"]

MessageTransform: TypeAlias = Callable[
    [ChatMessage, ChatKey], "ChatMessage | Awaitable[ChatMessage | None] | None"
]


class TransformingChatStorage(
    ForwardCheckpoints,
    ForwardReplace,
    ForwardSessions,
    ForwardSearch,
    ForwardRecords,
    ForwardRetention,
    ChatStorageWrapper,
):
    """Run ``transform(message, key)`` on every saved message before the inner store sees it.

    The transform may be sync or async. Returning ``None`` drops the message (it is absent
    from the result of ``save``). An exception raised by the transform propagates unchanged
    and nothing of the batch is stored: every message is transformed before the inner store
    is called. Fetches pass through. A transform with a ``transform_batch(messages, key)``
    method (sync or async, returning one result per message, in order, as calling it on
    each would) gets each batch in one call (``PIIScrubber`` has one).

    Every path that writes a message transforms it: ``save``, ``save_messages``, ``replace``,
    ``save_messages_if`` and each message of a summary checkpoint (``save_checkpoint``). The
    other abilities pass through unchanged (heads and tails, leases, sessions, search,
    records, purge); each is present only when the inner store has it
    (:func:`storage.abilities.find_ability`).

    Args:
        inner: the wrapped store.
        transform: ``(message, key) -> ChatMessage | None`` (or an awaitable of it). It must
            keep the message ``id`` so a retried save stays idempotent.
        thread_chars: a message holding more characters than this (content, text parts,
            tool-call arguments; with ``transform_batch``: a batch) is transformed in a worker
            thread, so scrubbing a huge tool result does not stall the event loop; default
            65,536 (a thread hop costs ~100 µs, far less than scrubbing that much text). The
            transform must then be thread-safe (``PIIScrubber`` is).

    Raises:
        InvalidMessageError: a message is invalid (checked before the transform sees it); a
            transform dropped a checkpoint's summary message.
    """

    def __init__(
        self, inner: ChatStorage, transform: MessageTransform, *, thread_chars: int = 65_536
    ) -> None:
        super().__init__(inner)
        self.transform = transform
        self.thread_chars = thread_chars

    async def _one(self, key: ChatKey, message: ChatMessage) -> ChatMessage | None:
        if _size(message) > self.thread_chars:
            result = await anyio.to_thread.run_sync(self.transform, message, key)
        else:
            result = self.transform(message, key)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _apply(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        batch = prepare_batch(messages)
        many = getattr(self.transform, "transform_batch", None)
        if many is None:
            out: list[ChatMessage] = []
            for message in batch:
                result = await self._one(key, message)
                if result is not None:
                    out.append(result)
            return out
        if sum(map(_size, batch)) > self.thread_chars:
            results = await anyio.to_thread.run_sync(many, batch, key)
        else:
            results = many(batch, key)
        if inspect.isawaitable(results):
            results = await results
        if len(results) != len(batch):
            raise InvalidMessageError(
                f"transform_batch returned {len(results)} results for {len(batch)} messages"
            )
        return [result for result in results if result is not None]

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        transformed = await self._apply(key, [message])
        if not transformed:
            return []
        result: list[ChatMessage] = await self.inner.save(key, transformed[0])
        return result

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        transformed = await self._apply(key, messages)
        if not transformed:
            return []
        result: list[ChatMessage] = await self.inner.save_messages(key, transformed)
        return result

    # --- abilities that carry messages ---------------------------------------------------

    async def replace(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Transform ``messages`` like ``save_messages``, then replace the inner record.

        Raises:
            InvalidMessageError: ``messages`` is not a valid history (before the transform),
                or the transformed one is not (a dropped call orphaning its result).
        """
        transformed = await self._apply(key, validate_history(list(messages), system="anywhere"))
        result: list[ChatMessage] = await self.inner.replace(key, transformed)
        return result

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """Transform ``messages`` like ``save_messages``, then save them if the version holds
        (the inner store checks it even when every message was dropped).

        Raises:
            ConflictError: the key's version is not ``expected_version`` (nothing stored).
        """
        transformed = await self._apply(key, messages)
        result: list[ChatMessage] = await self.inner.save_messages_if(
            key, transformed, expected_version=expected_version
        )
        return result

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Transform each summary message, then compare-and-set the inner checkpoint.

        Raises:
            InvalidMessageError: a checkpoint message is invalid, or the transform dropped
                one (a summary cannot lose a message silently).
        """
        messages: list[ChatMessage] = []
        for index, message in enumerate(prepare_batch(list(checkpoint.messages))):
            result = await self._one(key, message)
            if result is None:
                raise InvalidMessageError(
                    f"checkpoint message {index}: the transform dropped a summary message"
                )
            messages.append(result)
        transformed = attrs.evolve(checkpoint, messages=tuple(messages))
        stored: SummaryCheckpoint | None = await self.inner.save_checkpoint(
            key, transformed, expected_version=expected_version
        )
        return stored

    def describe(self) -> str:
        own = getattr(self.transform, "describe", None)
        what = (
            own()
            if callable(own)
            else getattr(self.transform, "__name__", type(self.transform).__name__)
        )
        return f"TransformingChatStorage(transform={what})"


def _size(message: ChatMessage) -> int:
    """Characters of text a transform has to read in ``message`` (a cheap upper bound)."""
    content = message.content
    size = len(content) if isinstance(content, str) else 0
    if isinstance(content, tuple):
        for part in content:
            text = part.get("text")
            if isinstance(text, str):
                size += len(text)
    for call in message.tool_calls:
        size += len(call.arguments)
    return size
