"""The values the optional abilities take and return: heads, tails, checkpoints, sessions,
search hits and conversation records (attrs, frozen)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any

import attrs

from storage.message import ChatKey, ChatMessage, freeze, new_message_id

__all__ = [
    "ConversationRecord",
    "Head",
    "SearchHit",
    "SessionInfo",
    "SessionPage",
    "SummaryCheckpoint",
    "Tail",
]


def _message_tuple(messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    return tuple(messages)


@attrs.frozen(slots=True)
class Head:
    """The cheap state of one key: what a cache needs to know whether its copy is current.

    Attributes:
        last_seq: sequence number of the newest raw message (0 when the key holds none).
        epoch: names this incarnation of the key's record; it changes whenever messages are
            removed (``delete``, ``delete_user``, ``replace``, a retention purge), so a copy
            made under another epoch is stale whatever ``last_seq`` says. ``""`` when the key
            holds nothing.
        checkpoint_version: version of the key's summary checkpoint (0: none).
    """

    last_seq: int
    epoch: str
    checkpoint_version: int = 0

    @property
    def version(self) -> str:
        """An opaque token that changes on every write to the key's raw record (for
        :meth:`ReplaceableStorage.save_messages_if`)."""
        return f"{self.epoch}.{self.last_seq}"


@attrs.frozen(slots=True)
class Tail:
    """Raw messages of one key after a sequence number, read in one consistent snapshot.

    Attributes:
        head: the key's head at the time of the read.
        seqs: the sequence number of each message (same length as ``messages``).
        messages: the messages with ``seq > after``, oldest first, as stored.
    """

    head: Head
    seqs: tuple[int, ...]
    messages: tuple[ChatMessage, ...]


@attrs.frozen(slots=True)
class SummaryCheckpoint:
    """A key's current summary, stored beside (never inside) its raw record.

    The model view of a key is ``messages`` followed by the raw messages with
    ``seq > covers_to``.

    Attributes:
        messages: the summary message(s), each marked ``is_summary``.
        covers_to: sequence number of the last raw message the summary covers (inclusive).
        epoch: the record epoch it was made under (a checkpoint of another epoch is void).
        summarizer: what made it (the summarizer's ``describe()``, or ``"manual"``).
        created_at: when it was made (UTC).
        version: 1 for a key's first checkpoint, +1 for each one after; set by the store.
    """

    messages: tuple[ChatMessage, ...] = attrs.field(converter=_message_tuple)
    covers_to: int
    epoch: str
    summarizer: str
    created_at: datetime
    version: int = 0


@attrs.frozen(slots=True)
class SessionInfo:
    """One session of a user, as listed by :meth:`SessionListing.list_sessions`.

    Attributes:
        session_id: the session.
        agents: agent ids holding messages in it, sorted.
        message_count: raw messages in it, all agents together.
        first_at: ``created_at`` of its oldest message (UTC).
        last_at: the session's last activity, the sort key (newest first): the newest
            ``created_at`` saved to it while it held messages (UTC). Deleting some of its
            messages (a conversation of it, a purge) does not lower it, so a listing paged by
            cursor never meets a session twice; it is forgotten when the session holds none.
    """

    session_id: str
    agents: tuple[str, ...]
    message_count: int
    first_at: datetime
    last_at: datetime


@attrs.frozen(slots=True)
class SessionPage:
    """A page of sessions, newest activity first; ``next_cursor`` is ``None`` on the last."""

    sessions: tuple[SessionInfo, ...]
    next_cursor: str | None


@attrs.frozen(slots=True)
class SearchHit:
    """One message found by :meth:`SearchableStorage.search`.

    Attributes:
        key: the conversation holding it (always of the user searched).
        message: the message as stored (scrubbed text under a scrubbing layer).
        snippet: a short excerpt around the match, at most about 160 characters.
        score: relevance, higher is better (comparable within one result list only).
    """

    key: ChatKey
    message: ChatMessage
    snippet: str
    score: float


def _freeze_data(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not value:
        return MappingProxyType({})
    frozen: Mapping[str, Any] = freeze(value)
    return frozen


@attrs.frozen(slots=True)
class ConversationRecord:
    """An application record kept with a conversation that never reaches a model.

    A tool approval (``kind="tool_approval"``, ``data={"tool_call_id": ..., "decision":
    "approved"}``), UI state, a status. Returned only by :meth:`RecordStorage.fetch_records`,
    never by ``fetch``, never summarized; erased with the conversation.

    Attributes:
        kind: application-defined kind, a non-empty string.
        data: JSON-like data (read-only mapping).
        id: unique id; saving a record whose id is stored already is a no-op.
        created_at: set by the store at save when ``None`` (UTC).
        seq: the store's sequence number, comparable with the key's message sequence
            numbers (:class:`Tail`), so records interleave with messages; 0 until stored.
    """

    kind: str
    data: Mapping[str, Any] = attrs.field(factory=dict, converter=_freeze_data)
    id: str = attrs.field(factory=new_message_id)
    created_at: datetime | None = None
    seq: int = 0
