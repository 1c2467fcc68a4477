"""The optional abilities: small protocols a store may implement beside ``ChatStorage``.

Each ability is one ``Protocol`` whose methods carry the documentation; layers forward them
with forwarders made from these very methods (:mod:`storage.abilities.forwarding`) and say
what they do with each one (:mod:`storage.abilities.declaring`).

``isinstance(component, Ability)`` follows the stack rule: a layer has an ability only when
its declaration offers it and everything below it has it too (what
:func:`~storage.abilities.find_ability` returns); a store has it when it has the methods.
"""

from __future__ import annotations

from abc import ABCMeta
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from storage.abilities.timeline import AsOf, Timeline, ViewProvenance
from storage.abilities.values import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionPage,
    SummaryCheckpoint,
    Tail,
)
from storage.message import ChatKey, ChatMessage

__all__ = [
    "ABILITIES",
    "CheckpointStorage",
    "DescribableStorage",
    "ListableStorage",
    "RecordStorage",
    "ReplaceableStorage",
    "RetentionStorage",
    "SearchableStorage",
    "SequencedStorage",
    "SessionListing",
    "TimeTravelStorage",
    "ability_methods",
    "offered_through",
]

# typing's own structural check (a store has an ability when it has the methods).
_structural: Callable[[type, object], bool] = cast(Any, type(Protocol)).__instancecheck__


def offered_through(stack: object, ability: type) -> bool:
    """Whether every component of ``stack``'s ``.inner`` chain has ``ability``: a layer by
    its declaration (``__chatlayers_abilities__``), anything else by its methods."""
    current: object | None = stack
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        declared: Any = getattr(type(current), "__chatlayers_abilities__", None)
        offered = None if declared is None else declared.offers(ability)
        if offered is None:  # a store, or a protocol the declaration does not know
            if not _structural(ability, current):
                return False
        elif not offered:
            return False
        current = getattr(current, "inner", None)
    return True


if TYPE_CHECKING:
    _AbilityMeta = ABCMeta
else:

    class _AbilityMeta(type(Protocol)):
        """Protocols whose ``isinstance`` of a layer follows the stack rule
        (:func:`offered_through`); of anything else it is typing's structural check."""

        def __instancecheck__(cls, instance: object) -> bool:
            if getattr(type(instance), "__chatlayers_abilities__", None) is None:
                return _structural(cls, instance)
            return offered_through(instance, cls)


@runtime_checkable
class DescribableStorage(Protocol, metaclass=_AbilityMeta):
    """A component that can say what it is in one line, secrets redacted."""

    def describe(self) -> str: ...


@runtime_checkable
class ListableStorage(Protocol, metaclass=_AbilityMeta):
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
class SequencedStorage(Protocol, metaclass=_AbilityMeta):
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

    async def load_checkpoint(
        self, key: ChatKey, *, version: int | None = None
    ) -> SummaryCheckpoint | None:
        """The key's checkpoint, or ``None`` (also when it belongs to an older epoch).

        With ``version``: that version of the key's checkpoint as it was stored, whatever
        came after it (a later compaction, a rewind that voided it), or ``None`` when it is
        not kept. Stores keep every version of a key until a ``replace`` or a retention purge
        of the key renumbers its record, or an erasure; each version names the epoch it was
        made under (compare it with what you expect). Versions of a key never repeat while
        it keeps them: ``head(key).checkpoint_version`` is the newest (a rewind that voids
        the checkpoint leaves it there, so the next one is ``+1``), and versions 1 to it
        that return a checkpoint are what a copy of the key (``migrate``) carries over.
        """
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
class ReplaceableStorage(Protocol, metaclass=_AbilityMeta):
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
class SessionListing(Protocol, metaclass=_AbilityMeta):
    """A store that can list a user's sessions from an index (not a scan of messages)."""

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """The user's sessions, newest activity first (``last_at`` desc, then ``session_id``).

        Cursors are keysets of a walk: the first page lists by ``last_at`` and bounds the
        walk at its newest session's; later pages keep the order of that moment, a session
        saved to since (``last_at`` past the bound) standing where its messages up to the
        bound put it. So a walk lists every session that exists for the whole walk exactly
        once, while other tasks and processes save to them; one made during the walk may
        or may not be listed, and one that lost messages keeps its place
        (``SessionInfo.last_at``). Each page shows the sessions' current infos.

        Raises:
            InvalidArgumentError: ``limit`` < 1 or a cursor this store did not make (forged,
                truncated, out of range).
        """
        ...


@runtime_checkable
class SearchableStorage(Protocol, metaclass=_AbilityMeta):
    """A store that can search one user's stored messages."""

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Messages of ``user_id`` matching ``query``, best first; never another user's.

        Raises:
            InvalidArgumentError: empty query or ``limit`` < 1.
        """
        ...


@runtime_checkable
class RecordStorage(Protocol, metaclass=_AbilityMeta):
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
class RetentionStorage(Protocol, metaclass=_AbilityMeta):
    """A store with a ``retention`` period that can purge older messages."""

    async def purge(self, *, now: datetime | None = None) -> int:
        """Delete messages older than ``now - retention`` (default ``now``: the store's
        clock), with the checkpoints of the keys they belonged to; return how many messages
        were deleted (0 when the store has no retention).

        What goes is widened by :func:`storage.purge.purge_mask`: tool groups go whole
        (never a result without its call, or a call without its results), and when the
        first message left would be the answer of a question that went, the messages up to
        the next user message go too, so the record still starts with a user turn."""
        ...


@runtime_checkable
class TimeTravelStorage(Protocol, metaclass=_AbilityMeta):
    """A record that can be forked, rewound and read as it stood, and a stack that can say
    what the model was given for a reply.

    The record stays append-only: :meth:`rewind` hides messages from the view without
    deleting them, :meth:`fork` copies, :meth:`fetch_as_of` and :meth:`fetch_timeline` read.

    What a faithful copy of a key carries (a mirror, a migration): its messages in store
    order, rewound ones included (:meth:`fetch_timeline`); its rewinds
    (``Timeline.rewinds``), replayed in order: save the messages up to and including the one
    with the rewind's ``through_seq``, then ``rewind(key, rewind.to_id)`` (which hides the
    same messages; the copy's rewind gets its own ``created_at`` and ``seq``); and its
    checkpoint versions (:meth:`CheckpointStorage.load_checkpoint` with ``version``).
    """

    async def fork(self, key: ChatKey, new_key: ChatKey, *, at: str | None = None) -> int:
        """Copy the record of ``key`` into ``new_key``, which must hold no message.

        ``new_key`` gets the view of ``key`` up to and including message ``at`` as it stood
        right after ``at`` was saved (``fetch_as_of(key, at)``: for a message of the current
        view, the view up to it), or the whole current view when ``at`` is ``None``: in
        order, with the same ids, contents and ``created_at``; rewound messages and records
        are not copied. The two keys then diverge. A summary checkpoint of ``key`` that
        covers exactly the copied messages up to its ``covers_to`` (its current one, or an
        older version of the same epoch) is carried over with ``covers_to`` renumbered to
        ``new_key``'s sequence, so a summarizing stack serves the fork the same view with no
        summarizer call. The messages are copied atomically, only while ``new_key`` holds
        none; the checkpoint follows in a second write (derived data: a fork that lost it
        is summarized again).

        Returns:
            How many messages were copied.

        Raises:
            InvalidKeyError: a key is not a ``ChatKey``.
            InvalidArgumentError: ``new_key`` is ``key`` or belongs to another user (a fork
                never crosses users); ``at`` is not the id of a message of ``key``, or a
                tool result answering a call at or before it follows (the fork's call would
                be unanswered).
            ConflictError: ``new_key`` holds messages (nothing copied).
        """
        ...

    async def rewind(self, key: ChatKey, to: str) -> int:
        """Hide the messages of the view after message ``to``.

        Afterwards ``fetch(key)`` (and a summarizing stack's view) is the view up to and
        including ``to``, then whatever is saved after the rewind. Nothing is deleted: the
        hidden messages stay in the record (:meth:`fetch_timeline`), ``fetch_all_chats``
        lists them with ``metadata["chatlayers"]["rewound"]`` (the UTC ISO-8601 time of the
        rewind), ``delete``/``delete_user`` erase them and retention purges them like any
        message. Their ids stay taken: saving one again is a no-op (save a copy under a new
        id to bring it back). A summary checkpoint that covers a hidden message is dropped
        from the view (its version is kept); one that covers only kept messages stays. The
        key's epoch changes, so every worker's cache rebuilds on its next read. Rewinding
        again, also to a message saved after an earlier rewind, hides more. Saves by other
        workers racing it land wholly before the rewind (hidden with the rest) or after it.

        Returns:
            How many messages were hidden (0 when ``to`` is the newest: nothing changes).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``to`` is not the id of a message of the current view
                (unknown, or hidden by an earlier rewind), or the next message of the view
                is a tool result answering a call at or before ``to`` (the call would be
                left unanswered: rewind to its last result, or before the call).
            ConflictError: (Redis) the record was rewritten under the rewind, deleted,
                replaced or given a new checkpoint, at each of 8 attempts; nothing changed.
        """
        ...

    async def fetch_as_of(self, key: ChatKey, at: AsOf) -> list[ChatMessage]:
        """The record as it stood at ``at``: messages saved later and rewinds made later not
        applied, earlier rewinds applied (:meth:`Timeline.as_of`: a sequence number, a
        message id, or a timezone-aware datetime compared with ``created_at``, which a caller
        may have set).

        Raises:
            InvalidArgumentError: ``at`` is none of those, or a message id the record lacks.
        """
        ...

    async def fetch_timeline(self, key: ChatKey) -> Timeline:
        """The key's whole record in one snapshot: every message with its sequence number,
        rewound ones included, and the rewinds."""
        ...

    async def provenance(self, key: ChatKey, message_id: str) -> ViewProvenance | None:
        """What the model was given for the reply ``message_id``: the view served by the
        last fetch of ``key`` before the reply was saved, rebuilt exactly (the summary as it
        was then, even after later compactions or rewinds).

        A summarizing layer records it (the checkpoint version and the raw range, not a
        copy) when the next assistant message saved through it after a fetch through it is
        that reply. ``None`` when it cannot be known: the reply was saved without such a
        fetch, what it answered is gone (a ``replace`` or a retention purge renumbered the
        record, an erasure), or the stack has no summarizing layer. A stack without one
        serves the record itself: the model was then given the record before the reply,
        ``fetch_as_of(key, seq - 1)`` with ``seq`` the reply's sequence number (or the
        newest ``limit`` of it when the caller fetched with one).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``message_id`` is not a non-empty str.
        """
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
    TimeTravelStorage,
)
"""Every optional ability, each declared by every layer (passes, transforms or hides)."""


def ability_methods(ability: type) -> tuple[str, ...]:
    """The methods ``ability`` declares itself (not those of the abilities it extends)."""
    return tuple(
        name
        for name, value in vars(ability).items()
        if not name.startswith("_") and callable(value)
    )
