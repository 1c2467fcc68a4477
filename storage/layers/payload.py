"""``PayloadLayer``: the one seam where a layer changes what messages and records carry.

A scrubber rewrites messages on their way down; an encrypting layer seals them on the way
down and opens them on the way up. Both change *payloads*, never keys, sequence numbers or
leases, so the methods that carry a payload are written once, here, and a layer only fills
in the hooks:

- ``_down(key, messages, what, send)``: transform validated ``messages`` and ``await
  send(transformed)`` (the inner call, which returns what the store kept), then return what
  the caller gets as stored; ``what`` is ``"messages"`` (``save``, ``save_messages``,
  ``save_messages_if``), ``"history"`` (``replace``: the whole record) or ``"checkpoint"``
  (a checkpoint's summary messages, never dropped);
- ``_up(key, messages, what)``: what the store returned, for the caller (``"history"``: a
  whole ``fetch``; ``"messages"``: a window, a tail, search hits; ``"checkpoint"``);
- ``_down_record(key, record, send)`` and ``_up_records(key, records)``: the same for
  conversation records;
- ``_up_session(user_id, session_id, rows)``: ``fetch_all_chats`` rows (by default each
  agent's messages through ``_up``).

Every hook defaults to identity; a layer whose way up is identity declares the pure reads
``passes`` (and forwards ``fetch`` and friends) so its reads cost nothing.

Time travel: ``fetch_as_of`` and ``fetch_timeline`` bring their messages up; ``rewind`` and
``provenance`` carry no payload and are forwarded; ``fork`` is the copy of
:func:`storage.abilities.forking.fork_by_copy` run through this layer, so each message and
checkpoint is brought up with the source key and down again with the new one (what a layer
whose payloads are bound to their key needs: an encrypting layer re-seals under the new key's
associated data). A layer whose payloads do not depend on the key passes the ability instead
(the store copies what it holds).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias, cast

import attrs

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
    SearchHit,
    SequencedStorage,
    SessionListing,
    SummaryCheckpoint,
    Tail,
    Timeline,
    TimeTravelStorage,
    forward,
)
from storage.abilities.forking import fork_by_copy
from storage.abilities.timeline import AsOf
from storage.errors import InvalidMessageError
from storage.history import prepare_batch, validate_history
from storage.message import AgentMessage, ChatKey, ChatMessage
from storage.protocol import ChatStorage, ChatStorageWrapper
from storage.stores.base import check_key
from storage.stores.checks import check_checkpoint, check_record

if TYPE_CHECKING:

    class Below(
        ChatStorage,
        ListableStorage,
        CheckpointStorage,
        ReplaceableStorage,
        SessionListing,
        SearchableStorage,
        RecordStorage,
        RetentionStorage,
        TimeTravelStorage,
        DescribableStorage,
    ):
        """The component below, typed with every ability (a method is called only when the
        caller found the ability through this layer, so the component below has it)."""

        async def replace(
            self,
            key: ChatKey,
            messages: Sequence[ChatMessage],
            *,
            expected_version: str | None = None,
        ) -> list[ChatMessage]: ...


__all__ = ["Down", "PayloadLayer", "Up"]

Down: TypeAlias = Literal["messages", "history", "checkpoint"]
Up: TypeAlias = Literal["messages", "history", "checkpoint"]
Send: TypeAlias = Callable[[list[ChatMessage]], Awaitable[list[ChatMessage]]]
SendRecord: TypeAlias = Callable[[ConversationRecord], Awaitable[ConversationRecord]]


class PayloadLayer(ChatStorageWrapper):
    """Base of the layers that transform payloads: every method that carries messages or
    record data, written once over the hooks (see the module). Keys, heads, leases, session
    listings and purges pass through.

    Args:
        inner: the wrapped store.
    """

    abilities = Abilities(
        passes=(ListableStorage, SessionListing, RetentionStorage),
        transforms=(
            DescribableStorage,
            SequencedStorage,
            CheckpointStorage,
            ReplaceableStorage,
            SearchableStorage,
            RecordStorage,
            TimeTravelStorage,
        ),
    )

    def __init__(self, inner: ChatStorage) -> None:
        super().__init__(inner)
        self._below = cast("Below", inner)

    # --- the hooks (identity here) ----------------------------------------------------

    async def _down(
        self, key: ChatKey, messages: list[ChatMessage], what: Down, send: Send
    ) -> list[ChatMessage]:
        return await send(messages)

    async def _up(self, key: ChatKey, messages: list[ChatMessage], what: Up) -> list[ChatMessage]:
        return messages

    async def _down_record(
        self, key: ChatKey, record: ConversationRecord, send: SendRecord
    ) -> ConversationRecord:
        return await send(record)

    async def _up_records(
        self, key: ChatKey, records: list[ConversationRecord]
    ) -> list[ConversationRecord]:
        return records

    async def _up_session(
        self, user_id: str, session_id: str, rows: list[AgentMessage]
    ) -> list[AgentMessage]:
        by_agent: dict[str, list[ChatMessage]] = {}
        for row in rows:
            by_agent.setdefault(row.agent_id, []).append(row.message)
        opened: dict[tuple[str, str], ChatMessage] = {}
        for agent_id, stored in by_agent.items():
            up = await self._up(ChatKey(user_id, session_id, agent_id), stored, "messages")
            opened.update(((agent_id, m.id), m) for m in up)
        out: list[AgentMessage] = []
        for row in rows:
            message = opened.get((row.agent_id, row.message.id))
            if message is not None:
                out.append(AgentMessage(row.agent_id, message))
        return out

    # --- ChatStorage -----------------------------------------------------------------

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        check_key(key)
        batch = prepare_batch([message])

        async def send(transformed: list[ChatMessage]) -> list[ChatMessage]:
            return await self.inner.save_messages(key, transformed) if transformed else []

        return await self._down(key, batch, "messages", send)

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        check_key(key)
        batch = prepare_batch(messages)
        if not batch:
            return []

        async def send(transformed: list[ChatMessage]) -> list[ChatMessage]:
            return await self.inner.save_messages(key, transformed) if transformed else []

        return await self._down(key, batch, "messages", send)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        stored = await self.inner.fetch(key, limit=limit)
        if not stored:
            return stored
        return await self._up(key, stored, "history" if limit is None else "messages")

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        rows = await self.inner.fetch_all_chats(user_id, session_id)
        if not rows:
            return rows
        return await self._up_session(user_id, session_id, rows)

    # --- SequencedStorage and CheckpointStorage -----------------------------------------

    head = forward(SequencedStorage.head)
    acquire_lease = forward(CheckpointStorage.acquire_lease)
    release_lease = forward(CheckpointStorage.release_lease)

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        tail = await self._below.fetch_since(key, after)
        if not tail.messages:
            return tail
        messages = await self._up(key, list(tail.messages), "messages")
        seqs = tail.seqs
        if len(messages) != len(seqs):  # some did not come up: keep seqs beside their own
            kept = {m.id for m in messages}
            pairs = zip(tail.seqs, tail.messages, strict=True)
            seqs = tuple(seq for seq, stored in pairs if stored.id in kept)
        return Tail(tail.head, seqs, tuple(messages))

    async def load_checkpoint(
        self, key: ChatKey, *, version: int | None = None
    ) -> SummaryCheckpoint | None:
        """The checkpoint (or its kept ``version``) with its messages brought up; ``None``
        also when some did not come up (a summary cannot lose a message silently: the view
        is rebuilt from the raw record instead)."""
        below = self._below
        checkpoint = (
            await below.load_checkpoint(key)
            if version is None
            else await below.load_checkpoint(key, version=version)
        )
        if checkpoint is None:
            return None
        messages = await self._up(key, list(checkpoint.messages), "checkpoint")
        if len(messages) != len(checkpoint.messages):
            return None
        return attrs.evolve(checkpoint, messages=tuple(messages))

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Bring each summary message down, then compare-and-set the inner checkpoint.

        Raises:
            InvalidArgumentError: a malformed checkpoint (as the inner store).
            InvalidMessageError: a checkpoint message is invalid or not marked as a summary;
                the layer dropped one (a summary cannot lose a message silently).
        """
        check_key(key)
        checked = check_checkpoint(checkpoint)
        stored: SummaryCheckpoint | None = None

        async def send(messages: list[ChatMessage]) -> list[ChatMessage]:
            nonlocal stored
            if len(messages) != len(checked.messages):
                raise InvalidMessageError(
                    "checkpoint: the layer dropped a summary message (a summary cannot lose "
                    "a message)"
                )
            stored = await self._below.save_checkpoint(
                key,
                attrs.evolve(checked, messages=tuple(messages)),
                expected_version=expected_version,
            )
            return [] if stored is None else list(stored.messages)

        messages = await self._down(key, list(checked.messages), "checkpoint", send)
        if stored is None:
            return None
        return attrs.evolve(stored, messages=tuple(messages))

    # --- ReplaceableStorage ------------------------------------------------------------

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        """Validate ``messages`` as a record, bring them down, replace the inner record.

        Raises:
            InvalidMessageError: ``messages`` is not a valid history (before the layer sees
                it), or the transformed one is not (a dropped call orphaning its result).
            ConflictError: ``expected_version`` is given and someone wrote since.
        """
        check_key(key)
        batch = prepare_batch(validate_history(list(messages), system="anywhere"))

        async def send(transformed: list[ChatMessage]) -> list[ChatMessage]:
            if expected_version is None:
                return await self._below.replace(key, transformed)
            return await self._below.replace(key, transformed, expected_version=expected_version)

        return await self._down(key, batch, "history", send)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """Bring ``messages`` down, then save them if the key's version holds (the inner
        store checks it even when the layer dropped every message).

        Raises:
            ConflictError: the key's version is not ``expected_version`` (nothing stored).
        """
        check_key(key)
        batch = prepare_batch(messages)

        async def send(transformed: list[ChatMessage]) -> list[ChatMessage]:
            return await self._below.save_messages_if(
                key, transformed, expected_version=expected_version
            )

        return await self._down(key, batch, "messages", send)

    # --- SearchableStorage and RecordStorage --------------------------------------------

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """The inner store's hits with their messages brought up (a hit whose message does
        not come up is left out)."""
        hits = await self._below.search(user_id, query, limit=limit)
        by_key: dict[ChatKey, list[ChatMessage]] = {}
        for hit in hits:
            by_key.setdefault(hit.key, []).append(hit.message)
        up: dict[tuple[ChatKey, str], ChatMessage] = {}
        for key, stored in by_key.items():
            up.update(((key, m.id), m) for m in await self._up(key, stored, "messages"))
        return [
            attrs.evolve(hit, message=up[(hit.key, hit.message.id)])
            for hit in hits
            if (hit.key, hit.message.id) in up
        ]

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """Bring the record down and store it (idempotent by id); return it as stored.

        Raises:
            InvalidArgumentError: empty ``kind`` or data that is not JSON-like (before the
                layer sees it).
        """
        check_key(key)
        checked = check_record(record)

        async def send(transformed: ConversationRecord) -> ConversationRecord:
            return await self._below.save_record(key, transformed)

        return await self._down_record(key, checked, send)

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        records = await self._below.fetch_records(key, kind=kind)
        if not records:
            return records
        return await self._up_records(key, records)

    # --- TimeTravelStorage ----------------------------------------------------------------

    rewind = forward(TimeTravelStorage.rewind)
    provenance = forward(TimeTravelStorage.provenance)

    async def fetch_as_of(self, key: ChatKey, at: AsOf) -> list[ChatMessage]:
        """The inner store's record as it stood at ``at``, its messages brought up."""
        stored = await self._below.fetch_as_of(key, at)
        if not stored:
            return stored
        return await self._up(key, stored, "messages")

    async def fetch_timeline(self, key: ChatKey) -> Timeline:
        """The inner store's timeline, its messages brought up (one that does not come up
        is left out with its sequence number)."""
        timeline = await self._below.fetch_timeline(key)
        if not timeline.messages:
            return timeline
        messages = await self._up(key, list(timeline.messages), "messages")
        seqs = timeline.seqs
        if len(messages) != len(seqs):
            kept = {m.id for m in messages}
            pairs = zip(timeline.seqs, timeline.messages, strict=True)
            seqs = tuple(seq for seq, stored in pairs if stored.id in kept)
        return attrs.evolve(timeline, seqs=seqs, messages=messages)

    async def fork(self, key: ChatKey, new_key: ChatKey, *, at: str | None = None) -> int:
        """Copy the view of ``key`` into the empty ``new_key`` through this layer (each
        message and the carried checkpoint brought up with ``key`` and down with
        ``new_key``): :meth:`storage.abilities.TimeTravelStorage.fork`.

        Raises:
            InvalidArgumentError: ``new_key`` is ``key`` or of another user; ``at`` is not
                a message of ``key``.
            ConflictError: ``new_key`` holds messages (nothing copied).
        """
        return await fork_by_copy(self, key, new_key, at)
