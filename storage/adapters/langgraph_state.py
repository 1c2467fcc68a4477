"""What a LangGraph thread's ``messages`` channel holds, kept over an append-only record.

LangGraph reducers edit the channel: ``add_messages`` replaces a message with the same id and
removes messages (``RemoveMessage``, ``REMOVE_ALL_MESSAGES``); ``operator.add`` appends
messages that may have no id at all. The chatlayers record stays append-only, so the
checkpointer keeps, beside it:

- a *ref* per channel entry: the id of the stored message it stands for (the LangChain id
  when it has one; a generated id for a message without one, or for a new version of an
  edited message, whose LangChain id rides in ``metadata["langgraph"]["id"]``);
- a *state record* (:class:`~storage.abilities.ConversationRecord` of kind
  ``"langgraph.messages"``) written only when an update is not a pure append: the refs of
  the whole channel then. The thread's channel is the newest state record's refs followed by
  every message stored after it (another worker's turns), or the whole record when it has
  none.

Entries are matched to refs by object identity with what this process last read or wrote,
then by LangChain id, then (no id) by position and equality, so a message is stored once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeGuard

import attrs

from storage.abilities import (
    ConversationRecord,
    RecordStorage,
    SequencedStorage,
    find_ability,
)
from storage.message import ChatKey, ChatMessage, new_message_id, thaw
from storage.protocol import ChatStorage

try:
    from langchain_core.messages import BaseMessage, RemoveMessage

    from storage.adapters.langchain import from_chat_message, to_chat_message
except ImportError as exc:  # pragma: no cover - the langgraph module reports it
    from storage.adapters import missing_extra

    raise missing_extra("langgraph", "langgraph", exc) from exc

__all__ = [
    "STATE_KIND",
    "Channel",
    "Known",
    "is_message_channel",
    "is_summary",
    "match",
    "project",
    "to_langchain",
]

STATE_KIND: Final = "langgraph.messages"
META: Final = "langgraph"
_MARK: Final = "chatlayers"
_MAX_THREADS: Final = 1024


def is_summary(message: BaseMessage) -> bool:
    """A summary the stack served (marked where no model provider reads it)."""
    mark = message.response_metadata.get(_MARK)
    return isinstance(mark, dict) and bool(mark.get("summary"))


def to_langchain(message: ChatMessage) -> BaseMessage:
    """The LangChain message for a stored one: a summary marked, an edited version under the
    LangChain id of the message it replaced."""
    converted = from_chat_message(message)
    if message.is_summary:
        # Marked so the next checkpoint does not store the summary as a new message.
        converted.response_metadata = {**converted.response_metadata, _MARK: {"summary": True}}
    meta = message.metadata.get(META)
    if isinstance(meta, Mapping) and isinstance(meta.get("id"), str):
        converted.id = meta["id"]
    return converted


def is_message_channel(value: Any) -> TypeGuard[list[BaseMessage]]:
    """A list the checkpointer can keep in the stack: chat messages only (no ``RemoveMessage``
    left by a plain list reducer, no other values)."""
    return isinstance(value, list) and all(
        isinstance(m, BaseMessage) and not isinstance(m, RemoveMessage) for m in value
    )


@attrs.define
class Known:
    """The channel as this process last read or wrote it: the objects and their refs."""

    objects: list[BaseMessage]
    refs: list[str]


def _edited(message: BaseMessage) -> ChatMessage:
    """A new version of a message whose LangChain id is stored already with other content."""
    converted = to_chat_message(message)
    metadata = {**thaw(converted.metadata), META: {"id": message.id}}
    return attrs.evolve(converted, id=new_message_id(), metadata=metadata)


def match(messages: Sequence[BaseMessage], base: Known) -> tuple[list[str], list[ChatMessage]]:
    """The refs of ``messages`` and the messages to store (in channel order).

    Raises:
        InvalidMessageError: a message cannot be converted.
    """
    by_object = {id(o): r for o, r in zip(base.objects, base.refs, strict=True)}
    by_lc_id = {o.id: (o, r) for o, r in zip(base.objects, base.refs, strict=True) if o.id}
    refs: list[str] = []
    batch: list[ChatMessage] = []
    for index, message in enumerate(messages):
        ref = by_object.get(id(message))
        if ref is None and message.id:
            hit = by_lc_id.get(message.id)
            if hit is not None and hit[0] == message:
                ref = hit[1]
            elif is_summary(message):
                ref = message.id
            elif hit is not None:
                edited = _edited(message)
                batch.append(edited)
                ref = edited.id
            else:
                # Stored under its own id (a repeat is a no-op in the store).
                batch.append(to_chat_message(message))
                ref = message.id
        elif ref is None:
            same_place = index < len(base.objects) and base.objects[index] == message
            if same_place and not base.objects[index].id:
                ref = base.refs[index]
            else:
                converted = to_chat_message(message)
                batch.append(converted)
                ref = converted.id
        refs.append(ref)
    return refs, batch


def project(view: Sequence[ChatMessage], refs: Sequence[str]) -> list[ChatMessage]:
    """The channel from the stack's view: the messages ``refs`` name, in their order; the
    view's summary first when some of them are only in the summary now."""
    by_id = {m.id: m for m in view}
    chosen: list[ChatMessage] = []
    taken: set[str] = set()
    missing = False
    for ref in refs:
        message = by_id.get(ref)
        if message is None:
            missing = True
        elif ref not in taken:
            taken.add(ref)
            chosen.append(message)
    if missing:
        chosen[:0] = [m for m in view if m.is_summary and m.id not in taken]
    return chosen


class Channel:
    """Per-thread bookkeeping of one checkpointer: the last known channel of each thread
    (bounded, least recently used dropped) and the state records in the stack."""

    def __init__(self, stack: ChatStorage) -> None:
        self.stack = stack
        self._known: OrderedDict[ChatKey, Known] = OrderedDict()

    def get(self, key: ChatKey) -> Known | None:
        known = self._known.get(key)
        if known is not None:
            self._known.move_to_end(key)
        return known

    def remember(self, key: ChatKey, known: Known) -> None:
        self._known[key] = known
        self._known.move_to_end(key)
        while len(self._known) > _MAX_THREADS:
            self._known.popitem(last=False)

    def forget(self, key: ChatKey) -> None:
        self._known.pop(key, None)

    def keeps_edits(self) -> bool:
        """Whether edits reach other processes (the stack keeps records and sequences)."""
        return (
            find_ability(self.stack, RecordStorage) is not None
            and find_ability(self.stack, SequencedStorage) is not None
        )

    async def stored_refs(self, key: ChatKey) -> list[str] | None:
        """The thread's refs from its newest state record and the messages stored after it;
        ``None`` when it has no state record (the whole record is the channel)."""
        records = find_ability(self.stack, RecordStorage)
        sequenced = find_ability(self.stack, SequencedStorage)
        if records is None or sequenced is None:
            return None
        found = await records.fetch_records(key, kind=STATE_KIND)
        if not found:
            return None
        newest = found[-1]
        ids = newest.data.get("ids")
        refs = [r for r in ids if isinstance(r, str)] if isinstance(ids, Sequence) else []
        tail = await sequenced.fetch_since(key, newest.seq)
        listed = set(refs)
        refs.extend(m.id for m in tail.messages if m.id not in listed)
        return refs

    async def save_refs(self, key: ChatKey, refs: Sequence[str]) -> bool:
        """Write a state record; ``False`` when the stack keeps no records."""
        records = find_ability(self.stack, RecordStorage)
        if records is None:
            return False
        await records.save_record(key, ConversationRecord(STATE_KIND, {"ids": list(refs)}))
        return True
