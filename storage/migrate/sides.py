"""One end of a copy or a comparison: the part of a stack that holds the record.

A migration reads and writes the *record*: messages with their ids, order and times, the
summary checkpoint, the application records. View layers (``summarize::``, ``strict::``)
shape what the model sees and never write the record (both hide ``CheckpointStorage``), so
a side is the outermost component of the stack that keeps checkpoints (else the outermost
that gives sequence numbers, else the top): in ``summarize::scrub::sqlite:///x.db`` it is
``scrub::sqlite`` (reads pass through the scrubber, writes are scrubbed: idempotent on
scrubbed data), in ``encrypt::…`` the encrypting layer (reads are decrypted, writes sealed
with the target's keys).

:func:`read_snapshot` reads one conversation: checkpoint first, then the raw record with its
sequence numbers (so the checkpoint covers a message of the record read), then the records.
"""

from __future__ import annotations

from typing import Any

import attrs

from storage.abilities import (
    CheckpointStorage,
    ConversationRecord,
    Head,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    Rewind,
    SequencedStorage,
    SummaryCheckpoint,
    TimeTravelStorage,
    find_ability,
)
from storage.config.stack import components, describe_lines
from storage.errors import ConfigError
from storage.message import ChatKey, ChatMessage
from storage.migrate.journal import is_reserved
from storage.protocol import ChatStorage

__all__ = ["Side", "Snapshot", "key_order", "read_snapshot", "record_side"]

_ATTEMPTS = 3


def key_order(key: ChatKey) -> tuple[str, str, str]:
    """The order ``list_keys`` returns keys in."""
    return (key.user_id, key.session_id, key.agent_id)


@attrs.frozen
class Side:
    """The record part of a stack and the abilities it has (``None``: it has not).

    Attributes:
        storage: the component reads and writes go through.
        label: the stack's innermost store, for messages (redacted).
    """

    storage: ChatStorage
    label: str
    listable: ListableStorage | None
    sequenced: SequencedStorage | None
    checkpoints: CheckpointStorage | None
    records: RecordStorage | None
    replaceable: ReplaceableStorage | None
    retention: RetentionStorage | None
    travel: TimeTravelStorage | None = None

    async def keys(self, user_id: str | None = None) -> list[ChatKey]:
        """Every conversation, sorted, the layers' own bookkeeping left out.

        Raises:
            ConfigError: the store cannot list its keys.
        """
        if self.listable is None:
            raise ConfigError(f"{self.label} cannot list its conversations (no list_keys)")
        found = await self.listable.list_keys(user_id)
        return [key for key in found if not is_reserved(key.user_id)]


def record_side(stack: object) -> Side:
    """The :class:`Side` of ``stack`` (see the module for which component it is)."""
    parts: list[Any] = components(stack) or [stack]
    chosen = next(
        (c for c in parts if find_ability(c, CheckpointStorage) is not None),
        next((c for c in parts if find_ability(c, SequencedStorage) is not None), parts[0]),
    )
    lines = describe_lines(stack)
    return Side(
        storage=chosen,
        label=lines[-1] if lines else type(chosen).__name__,
        listable=find_ability(chosen, ListableStorage),
        sequenced=find_ability(chosen, SequencedStorage),
        checkpoints=find_ability(chosen, CheckpointStorage),
        records=find_ability(chosen, RecordStorage),
        replaceable=find_ability(chosen, ReplaceableStorage),
        retention=find_ability(chosen, RetentionStorage),
        travel=find_ability(chosen, TimeTravelStorage),
    )


@attrs.frozen
class Snapshot:
    """One conversation as a side holds it.

    Attributes:
        messages: the raw record, oldest first (rewound messages included, unmarked, on a
            side with time travel).
        seqs: the sequence number of each message (``None``: the side has none).
        head: the key's head at the read (``None`` without sequence numbers).
        checkpoint: the summary checkpoint of the record read (``None``: none), its
            ``covers_to`` one of ``seqs``.
        records: the application records, in store order.
        rewinds: the key's rewinds, oldest first (their ``seq`` among ``seqs``).
        versions: every checkpoint version the side keeps, oldest first (the current one
            last when there is one), each with its own ``epoch`` and ``covers_to``.
    """

    messages: tuple[ChatMessage, ...]
    seqs: tuple[int, ...] | None
    head: Head | None
    checkpoint: SummaryCheckpoint | None
    records: tuple[ConversationRecord, ...]
    rewinds: tuple[Rewind, ...] = ()
    versions: tuple[SummaryCheckpoint, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.messages and not self.records and self.checkpoint is None

    def id_at(self, seq: int) -> str | None:
        """The id of the message with sequence number ``seq`` (``None``: none)."""
        if self.seqs is None:
            return None
        for message, at in zip(self.messages, self.seqs, strict=True):
            if at == seq:
                return message.id
        return None

    def version_marks(self) -> list[tuple[str, str, str | None, tuple[str, ...]]]:
        """What names each kept version across stores: its summarizer, time, the id of
        the message it covers and its summary messages' ids (sequence numbers, epochs and
        version numbers are each store's own)."""
        return [
            (
                v.summarizer,
                v.created_at.isoformat(),
                self.id_at(v.covers_to),
                tuple(m.id for m in v.messages),
            )
            for v in self.versions
        ]

    def rewind_marks(self) -> list[tuple[str, int, int]]:
        """What names each rewind across stores: the message it rewound to, how many it
        hid, and how many messages the record held when it was made."""
        seqs = self.seqs or ()
        return [(r.to_id, r.hidden, sum(1 for s in seqs if s < r.seq)) for r in self.rewinds]

    def record_places(self) -> list[tuple[str, int]] | None:
        """Each record's id with how many messages come before it (its place among the
        messages, comparable across stores); ``None`` without sequence numbers."""
        if self.seqs is None:
            return None
        seqs, places, before = self.seqs, [], 0
        for record in sorted(self.records, key=lambda r: r.seq):
            # A record shares no number with a message: one with the next message's number
            # comes before that message (as the copy writes it).
            while before < len(seqs) and seqs[before] < record.seq:
                before += 1
            places.append((record.id, before))
        return places

    def seq_of(self, message_id: str) -> int | None:
        """The sequence number of the message ``message_id`` (``None``: not held)."""
        if self.seqs is None:
            return None
        for message, seq in zip(self.messages, self.seqs, strict=True):
            if message.id == message_id:
                return seq
        return None

    def covered_id(self) -> str | None:
        """The id of the last message the checkpoint covers (``None``: no checkpoint)."""
        if self.checkpoint is None or self.seqs is None:
            return None
        covers = self.checkpoint.covers_to
        found = None
        for message, seq in zip(self.messages, self.seqs, strict=True):
            if seq > covers:
                break
            found = message.id
        return found


async def read_snapshot(side: Side, key: ChatKey) -> Snapshot:
    """Read ``key`` from ``side``: checkpoint, raw record (one snapshot with its head),
    records. A checkpoint of another epoch than the record read, or written between the two
    reads, is read again; one that still does not match the record is left out."""
    checkpoint: SummaryCheckpoint | None = None
    messages: tuple[ChatMessage, ...] = ()
    seqs: tuple[int, ...] | None = None
    head: Head | None = None
    rewinds: tuple[Rewind, ...] = ()
    for _ in range(_ATTEMPTS):
        checkpoint = (
            await side.checkpoints.load_checkpoint(key) if side.checkpoints is not None else None
        )
        if side.travel is not None:  # the whole record, rewound messages and rewinds too
            timeline = await side.travel.fetch_timeline(key)
            messages, seqs, head = timeline.messages, timeline.seqs, timeline.head
            rewinds = timeline.rewinds
        elif side.sequenced is None:
            messages = tuple(await side.storage.fetch(key))
            break
        else:
            tail = await side.sequenced.fetch_since(key, 0)
            messages, seqs, head = tail.messages, tail.seqs, tail.head
        if checkpoint is None or (
            checkpoint.epoch == head.epoch and checkpoint.version == head.checkpoint_version
        ):
            break
    if checkpoint is not None and (
        head is None
        or checkpoint.epoch != head.epoch
        or seqs is None
        or not seqs
        or checkpoint.covers_to < seqs[0]
    ):
        checkpoint = None  # void: made under another record, or covering nothing held
    records = tuple(await side.records.fetch_records(key)) if side.records is not None else ()
    versions = await _versions(side, key, head) if side.travel is not None else ()
    return Snapshot(messages, seqs, head, checkpoint, records, rewinds, versions)


async def _versions(side: Side, key: ChatKey, head: Head | None) -> tuple[SummaryCheckpoint, ...]:
    """Every checkpoint version ``side`` keeps for ``key`` (1 to the head's), oldest first."""
    if side.checkpoints is None or head is None:
        return ()
    load: Any = side.checkpoints.load_checkpoint
    found = [await load(key, version=v) for v in range(1, head.checkpoint_version + 1)]
    return tuple(v for v in found if v is not None)
