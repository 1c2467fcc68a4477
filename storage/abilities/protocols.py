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
"""Every optional ability, each declared by every layer (passes, transforms or hides)."""


def ability_methods(ability: type) -> tuple[str, ...]:
    """The methods ``ability`` declares itself (not those of the abilities it extends)."""
    return tuple(
        name
        for name, value in vars(ability).items()
        if not name.startswith("_") and callable(value)
    )
