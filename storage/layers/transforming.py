"""``TransformingChatStorage``: rewrite (or drop) each message before the inner store sees it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeAlias

import anyio
import anyio.to_thread

from storage.abilities import (
    Abilities,
    CheckpointStorage,
    ConversationRecord,
    DescribableStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    TimeTravelStorage,
    forward,
)
from storage.errors import InvalidMessageError
from storage.layers.payload import Down, PayloadLayer, Send, SendRecord
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.telemetry import Recorder, recorder

__all__ = [
    "OWN_KINDS",
    "BatchTransform",
    "MessageTransform",
    "RecordTransform",
    "TransformingChatStorage",
]

OWN_KINDS = "chatlayers."
"""Record kinds chatlayers writes itself (no text; never given to ``transform_record``)."""

MessageTransform: TypeAlias = Callable[
    [ChatMessage, ChatKey], "ChatMessage | Awaitable[ChatMessage | None] | None"
]
RecordTransform: TypeAlias = Callable[
    [ConversationRecord, ChatKey], "ConversationRecord | Awaitable[ConversationRecord]"
]
BatchTransform: TypeAlias = Callable[
    [list[ChatMessage], ChatKey],
    "Sequence[ChatMessage | None] | Awaitable[Sequence[ChatMessage | None]]",
]


class TransformingChatStorage(PayloadLayer):
    """Run ``transform(message, key)`` on every saved message before the inner store sees it.

    The transform may be sync or async. Returning ``None`` drops the message (it is absent
    from the result of ``save``). An exception raised by the transform propagates unchanged
    and nothing of the batch is stored: every message is transformed before the inner store
    is called. Fetches pass through. A transform with a ``transform_batch(messages, key)``
    method (sync or async, returning one result per message, in order, as calling it on
    each would) gets each batch in one call (``PIIScrubber`` has one).

    Every path that writes a message transforms it: ``save``, ``save_messages``, ``replace``,
    ``save_messages_if`` and each message of a summary checkpoint (``save_checkpoint``).
    Records (``save_record``) go through the transform's ``transform_record(record, key)``
    when it has one (``PIIScrubber`` scrubs their data); a plain function transform leaves
    them as they are, and so do records of chatlayers' own kinds (``chatlayers.*``, such as
    the summarizing layer's ``chatlayers.provenance``: ids, sequence numbers and times, never
    text, which a transform must not rewrite). Reads, heads and tails, leases, sessions,
    search, purge and time travel pass through unchanged; each ability is present only when
    the inner store has it (:func:`storage.abilities.find_ability`). A ``fork`` copies what
    the store holds, transformed already: scrubbed text keeps the placeholders of the
    conversation it was saved in (a scrubber's placeholders depend on the key), so a value
    met again after the fork gets the fork's own placeholder.

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

    abilities = Abilities(
        passes=(
            ListableStorage,
            SequencedStorage,
            SessionListing,
            SearchableStorage,
            RetentionStorage,
            TimeTravelStorage,
        ),
        transforms=(DescribableStorage, CheckpointStorage, ReplaceableStorage, RecordStorage),
    )
    # The way up is identity: reads reach the inner store directly.
    fetch = forward(ChatStorage.fetch)
    fetch_all_chats = forward(ChatStorage.fetch_all_chats)
    load_checkpoint = forward(CheckpointStorage.load_checkpoint)
    fetch_records = forward(RecordStorage.fetch_records)

    def __init__(
        self, inner: ChatStorage, transform: MessageTransform, *, thread_chars: int = 65_536
    ) -> None:
        super().__init__(inner)
        self.transform = transform
        self.thread_chars = thread_chars
        own: RecordTransform | None = getattr(transform, "transform_record", None)
        self._record_transform = own if callable(own) else None
        many: BatchTransform | None = getattr(transform, "transform_batch", None)
        self._batch = many if callable(many) else None

    async def _one(self, key: ChatKey, message: ChatMessage) -> ChatMessage | None:
        if _size(message) > self.thread_chars:
            result = await anyio.to_thread.run_sync(self.transform, message, key)
        else:
            result = self.transform(message, key)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _all(self, key: ChatKey, messages: list[ChatMessage]) -> list[ChatMessage | None]:
        """Each message transformed (``None``: dropped), through the transform's
        ``transform_batch(messages, key)`` in one call when it has one."""
        many = self._batch
        if many is None:
            return [await self._one(key, message) for message in messages]
        if sum(map(_size, messages)) > self.thread_chars:
            results = await anyio.to_thread.run_sync(many, messages, key)
        else:
            results = many(messages, key)
        if inspect.isawaitable(results):
            results = await results
        if len(results) != len(messages):
            raise InvalidMessageError(
                f"transform_batch returned {len(results)} results for {len(messages)} messages"
            )
        return list(results)

    async def _down(
        self, key: ChatKey, messages: list[ChatMessage], what: Down, send: Send
    ) -> list[ChatMessage]:
        listener = recorder()
        if listener is not None:
            return await send(await self._transform_reported(listener, key, messages, what))
        return await send(await self._transform(key, messages, what))

    async def _transform(
        self, key: ChatKey, messages: list[ChatMessage], what: Down
    ) -> list[ChatMessage]:
        out: list[ChatMessage] = []
        for index, result in enumerate(await self._all(key, messages)):
            if result is not None:
                out.append(result)
            elif what == "checkpoint":
                raise InvalidMessageError(
                    f"checkpoint message {index}: the transform dropped a summary message"
                )
        return out

    async def _transform_reported(
        self, listener: Recorder, key: ChatKey, messages: list[ChatMessage], what: Down
    ) -> list[ChatMessage]:
        """:meth:`_transform` as a ``scrub`` span (``transform`` for another transform),
        with what a scrubber found (its ``counts``, by entity) reported as a ``pii`` event.
        The counts are compared before and after: exact unless a message large enough for
        a worker thread is transformed while another save of this layer runs."""
        counts = getattr(self.transform, "counts", None)
        name = "scrub" if isinstance(counts, Mapping) else "transform"
        before = dict(counts) if isinstance(counts, Mapping) else None
        with listener.span(name, key, {"messages": len(messages), "what": what}) as handle:
            out = await self._transform(key, messages, what)
            handle.set("messages.dropped", len(messages) - len(out))
            if before is not None and isinstance(counts, Mapping):
                found = {e: n - before.get(e, 0) for e, n in counts.items() if n != before.get(e)}
                if found:
                    listener.event("pii", key, found)
        return out

    async def _down_record(
        self, key: ChatKey, record: ConversationRecord, send: SendRecord
    ) -> ConversationRecord:
        transform = self._record_transform
        if transform is not None and not record.kind.startswith(OWN_KINDS):
            result = transform(record, key)
            record = await result if inspect.isawaitable(result) else result
        return await send(record)

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
