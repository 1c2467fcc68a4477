"""Optional abilities beside ``ChatStorage``: small protocols a store may implement.

``ChatStorage`` (``storage.protocol``) is what every store and layer must do. The protocols
here are what a store *can* do on top: list its keys, tell a cache whether it is current,
keep a summary checkpoint, replace a conversation atomically, list a user's sessions, search,
keep application records, purge old messages. Every built-in store implements all of them.

A layer forwards an ability only by inheriting its ``Forward*`` mixin (or implementing the
methods itself, when it must change what passes: a scrubber scrubs a checkpoint's messages, an
encrypting layer encrypts them). A layer that does not know an ability does not have it, so a
new ability can never bypass a layer silently: :func:`find_ability` returns a stack only when
*every* component of its ``.inner`` chain has the ability.

Sequence numbers (``seq``) are the store's own: strictly increasing within a key in commit
order, never reused for the key while its record lives (its ``epoch``). A reader that tails a
key by sequence never misses a row committed later with a smaller number.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs

from storage.errors import InvalidArgumentError
from storage.message import ChatKey, ChatMessage, freeze, new_message_id

__all__ = [
    "ABILITIES",
    "CheckpointStorage",
    "ConversationRecord",
    "DescribableStorage",
    "ForwardCheckpoints",
    "ForwardListing",
    "ForwardRecords",
    "ForwardReplace",
    "ForwardRetention",
    "ForwardSearch",
    "ForwardSequenced",
    "ForwardSessions",
    "Head",
    "ListableStorage",
    "RecordStorage",
    "ReplaceableStorage",
    "RetentionStorage",
    "SearchHit",
    "SearchableStorage",
    "SequencedStorage",
    "SessionInfo",
    "SessionListing",
    "SessionPage",
    "SummaryCheckpoint",
    "Tail",
    "decode_session_cursor",
    "encode_session_cursor",
    "find_ability",
]

A = TypeVar("A")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# The times a cursor may name: datetime's whole range, in µs since the Unix epoch.
_MIN_US = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
_MAX_US = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND


def _message_tuple(messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    return tuple(messages)


# --- value types ---------------------------------------------------------------------------


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


# --- abilities -----------------------------------------------------------------------------


@runtime_checkable
class DescribableStorage(Protocol):
    """A component that can say what it is in one line, secrets redacted."""

    def describe(self) -> str: ...


@runtime_checkable
class ListableStorage(Protocol):
    """A store that can list the keys it holds."""

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """Every key holding at least one message, sorted by (user_id, session_id, agent_id).

        Raises:
            InvalidKeyError: a filter is given but is not a valid key part.
            StorageUnavailableError: the backend cannot be reached.
        """
        ...


@runtime_checkable
class SequencedStorage(Protocol):
    """A store whose messages carry sequence numbers a cache can tail."""

    async def head(self, key: ChatKey) -> Head:
        """The key's head: one cheap indexed read (one round trip on a server)."""
        ...

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        """Raw messages with ``seq > after`` (``after=0``: all), and the head, in one snapshot.

        Raises:
            InvalidArgumentError: ``after`` is not an int >= 0.
        """
        ...


@runtime_checkable
class CheckpointStorage(SequencedStorage, Protocol):
    """A store that keeps one summary checkpoint per key and short leases for summarizing."""

    async def load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        """The key's checkpoint, or ``None`` (also when it belongs to an older epoch)."""
        ...

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Compare-and-set: store ``checkpoint`` as version ``expected_version + 1`` only if
        the current checkpoint's version is ``expected_version`` (0: none), its epoch is the
        key's current epoch and ``covers_to`` is a sequence the raw record holds.

        Returns:
            The checkpoint as stored (after inner transforms, with its new version), or
            ``None`` when another writer won or the record changed (nothing written).

        Raises:
            InvalidMessageError: a checkpoint message is invalid or not marked as a summary.
        """
        ...

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        """Take the key's summarizing lease for ``ttl`` seconds unless another owner holds an
        unexpired one; ``True`` when ``owner`` holds it now (re-acquiring extends it)."""
        ...

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        """Give the lease back if ``owner`` holds it (a no-op otherwise)."""
        ...


@runtime_checkable
class ReplaceableStorage(Protocol):
    """A store that can replace a whole conversation and save only if nobody else wrote."""

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        """Atomically replace the key's record with ``messages`` (checked with
        ``validate_history(messages, system="anywhere")``: a record, like ``save``, may hold
        instruction messages mid-way); starts a new epoch and drops the checkpoint.

        With ``expected_version`` (a ``Head.version`` read before), compare-and-replace: the
        record is replaced only if ``head(key).version`` is still that, checked atomically
        with the write, so an edit made from a read never erases a message appended after it.

        Raises:
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
            ConflictError: the key's version is not ``expected_version`` (nothing changed).
        """
        ...

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """``save_messages`` only if ``head(key).version == expected_version``.

        Raises:
            ConflictError: someone wrote since (nothing stored).
        """
        ...


@runtime_checkable
class SessionListing(Protocol):
    """A store that can list a user's sessions from an index (not a scan of messages)."""

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """The user's sessions, newest activity first (``last_at`` desc, then ``session_id``).

        Cursors are keysets: a page holds the sessions after the cursor's ``(last_at,
        session_id)``. Sessions untouched while paging come exactly once; one that gained
        messages meanwhile may move before the cursor (not listed again), and one that lost
        messages keeps its place (``SessionInfo.last_at``).

        Raises:
            InvalidArgumentError: ``limit`` < 1 or a cursor this store did not make (forged,
                truncated, out of range).
        """
        ...


@runtime_checkable
class SearchableStorage(Protocol):
    """A store that can search one user's stored messages."""

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Messages of ``user_id`` matching ``query``, best first; never another user's.

        Raises:
            InvalidArgumentError: empty query or ``limit`` < 1.
        """
        ...


@runtime_checkable
class RecordStorage(Protocol):
    """A store that keeps application records with a conversation."""

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """Store ``record`` (idempotent by id); return it as stored (``seq``, ``created_at``).

        Raises:
            InvalidArgumentError: empty ``kind`` or data that is not JSON-like.
        """
        ...

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        """The key's records in store order, optionally of one ``kind`` only."""
        ...


@runtime_checkable
class RetentionStorage(Protocol):
    """A store with a ``retention`` period that can purge older messages."""

    async def purge(self, *, now: datetime | None = None) -> int:
        """Delete messages older than ``now - retention`` (default ``now``: the store's
        clock), with the checkpoints of the keys they belonged to; return how many messages
        were deleted (0 when the store has no retention).

        Tool groups go whole (:func:`storage.history.whole_tool_groups`): when any message
        of an assistant's tool calls and their results is older than the cut-off, the whole
        group goes, so the record never holds a result without its call or a call without
        its results."""
        ...


ABILITIES: tuple[type, ...] = (
    DescribableStorage,
    ListableStorage,
    SequencedStorage,
    CheckpointStorage,
    ReplaceableStorage,
    SessionListing,
    SearchableStorage,
    RecordStorage,
    RetentionStorage,
)


def find_ability(stack: object, ability: type[A]) -> A | None:
    """``stack`` typed as ``ability`` when every component of its ``.inner`` chain has it.

    A layer that does not forward an ability hides it from the whole stack: calling it on a
    lower component would bypass that layer (a scrubber, an encrypting layer).
    """
    current: object | None = stack
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if not isinstance(current, ability):
            return None
        current = getattr(current, "inner", None)
    return stack if stack is not None else None  # type: ignore[return-value]


# --- forwarding mixins (layers) ------------------------------------------------------------


class ForwardListing:
    """Forward :class:`ListableStorage` to ``self.inner`` (keys are never transformed)."""

    inner: Any

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        result: list[ChatKey] = await self.inner.list_keys(user_id, session_id)
        return result


class ForwardSequenced:
    """Forward :class:`SequencedStorage` to ``self.inner`` unchanged."""

    inner: Any

    async def head(self, key: ChatKey) -> Head:
        result: Head = await self.inner.head(key)
        return result

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        result: Tail = await self.inner.fetch_since(key, after)
        return result


class ForwardCheckpoints(ForwardSequenced):
    """Forward :class:`CheckpointStorage` to ``self.inner`` unchanged."""

    async def load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        result: SummaryCheckpoint | None = await self.inner.load_checkpoint(key)
        return result

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        result: SummaryCheckpoint | None = await self.inner.save_checkpoint(
            key, checkpoint, expected_version=expected_version
        )
        return result

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        result: bool = await self.inner.acquire_lease(key, owner, ttl)
        return result

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        await self.inner.release_lease(key, owner)


class ForwardReplace:
    """Forward :class:`ReplaceableStorage` to ``self.inner`` unchanged."""

    inner: Any

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        result: list[ChatMessage] = await self.inner.replace(
            key, messages, expected_version=expected_version
        )
        return result

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        result: list[ChatMessage] = await self.inner.save_messages_if(
            key, messages, expected_version=expected_version
        )
        return result


class ForwardSessions:
    """Forward :class:`SessionListing` to ``self.inner``."""

    inner: Any

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        result: SessionPage = await self.inner.list_sessions(user_id, limit=limit, cursor=cursor)
        return result


class ForwardSearch:
    """Forward :class:`SearchableStorage` to ``self.inner``."""

    inner: Any

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        result: list[SearchHit] = await self.inner.search(user_id, query, limit=limit)
        return result


class ForwardRecords:
    """Forward :class:`RecordStorage` to ``self.inner``."""

    inner: Any

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        result: ConversationRecord = await self.inner.save_record(key, record)
        return result

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        result: list[ConversationRecord] = await self.inner.fetch_records(key, kind=kind)
        return result


class ForwardRetention:
    """Forward :class:`RetentionStorage` to ``self.inner``."""

    inner: Any

    async def purge(self, *, now: datetime | None = None) -> int:
        result: int = await self.inner.purge(now=now)
        return result


# --- session cursors -----------------------------------------------------------------------


def encode_session_cursor(last_at: datetime, session_id: str) -> str:
    """The opaque cursor after the session ``(last_at, session_id)`` (keyset pagination)."""
    us = (last_at - _EPOCH) // _MICROSECOND  # exact: a float would round some values
    raw = json.dumps([us, session_id], ensure_ascii=True, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("ascii")).decode("ascii").rstrip("=")


def decode_session_cursor(cursor: str) -> tuple[int, str]:
    """``(last_at in µs since the epoch, session_id)`` of a cursor.

    Only what :func:`encode_session_cursor` can make is accepted: a time within
    ``datetime``'s range and a session id that is a valid key part (non-empty, no NUL, no
    lone surrogate), so a forged cursor can never reach a store's query as an out-of-range
    integer or an unencodable string.

    Raises:
        InvalidArgumentError: the cursor was not made by :func:`encode_session_cursor`.
    """
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        fields = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        if type(fields) is not list or len(fields) != 2:
            raise ValueError("not a pair")
        us, session_id = fields
        if type(us) is not int or not _MIN_US <= us <= _MAX_US:
            raise ValueError("time out of range")
        if type(session_id) is not str or not session_id or "\x00" in session_id:
            raise ValueError("bad session id")
        session_id.encode("utf-8")  # a lone surrogate cannot reach a store
    except (ValueError, TypeError, UnicodeError, RecursionError) as exc:
        raise InvalidArgumentError(f"malformed session cursor {cursor!r}") from exc
    return us, session_id
