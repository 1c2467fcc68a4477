"""The ``TimeTravelStorage`` templates: ``rewind`` and ``fetch_timeline`` over the
``_rewind`` and ``_timeline`` hooks; ``fork``, ``fetch_as_of`` and ``provenance`` written
once on top of them (:func:`storage.abilities.forking.fork_by_copy` for ``fork``).

A store implementing the hooks keeps, per key, its rewinds and its messages in store order
(rewound ones included); ``fetch``, ``fetch_since`` and the windows leave out the messages
a rewind hid, and ``fetch_all_chats`` marks them (:func:`~storage.abilities.mark_rewound`).
"""

from __future__ import annotations

from datetime import datetime

from storage.abilities import AsOf, Timeline, ViewProvenance, check_as_of
from storage.abilities.forking import fork_by_copy, refuse_split_call
from storage.errors import InvalidArgumentError
from storage.message import ChatKey, ChatMessage, new_message_id
from storage.stores.base.core import MaybeAwaitable, StoreCore, check_key

__all__ = ["TimeTravelTemplate", "check_message_id", "not_in_view"]


def not_in_view(key: ChatKey, to: str) -> InvalidArgumentError:
    """The error of a rewind to a message that is not in the key's view."""
    return InvalidArgumentError(
        f"rewind: {to!r} is not a message of the view of {key} (unknown, or hidden by an "
        "earlier rewind); nothing changed"
    )


def check_message_id(value: object, what: str) -> str:
    """A message id argument.

    Raises:
        InvalidArgumentError: not a non-empty str.
    """
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{what} must be a message id (a non-empty str), got {value!r}")
    return value


class TimeTravelTemplate(StoreCore):
    """``fork``, ``rewind``, ``fetch_as_of``, ``fetch_timeline`` and ``provenance``."""

    def _timeline(self, key: ChatKey) -> MaybeAwaitable[Timeline]:
        """Every message of the key with its sequence number (rewound ones included) and
        its rewinds, with the head, in one snapshot."""
        raise NotImplementedError

    def _rewind(self, key: ChatKey, to: str, rewind_id: str, now: datetime) -> MaybeAwaitable[int]:
        """Atomically hide the messages of the view after message ``to`` (a non-empty str):
        record the rewind (``rewind_id``, made at ``now``, its ``seq`` taken from the key's
        message sequence), start a new epoch, store the checkpoint again as the next version
        under it when it covers only kept messages (else leave it void, its version still
        the head's). Return how many were hidden; with none hidden, change nothing.

        Raises:
            InvalidArgumentError: ``to`` is not a message of the view (nothing changed).
        """
        raise NotImplementedError

    async def fetch_timeline(self, key: ChatKey) -> Timeline:
        """The key's whole record in one snapshot: every message with its sequence number,
        rewound ones included, and the rewinds (oldest first).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
            CorruptRecordError: a stored message cannot be decoded.
        """
        check_key(key)
        self._check_open()
        return await self._call(self._timeline, key)

    async def fetch_as_of(self, key: ChatKey, at: AsOf) -> list[ChatMessage]:
        """The record as it stood at ``at`` (:meth:`storage.abilities.Timeline.as_of`).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidArgumentError: ``at`` is not an int >= 0, a message id the record holds
                or a timezone-aware datetime.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key(key)
        check_as_of(at)
        self._check_open()
        timeline = await self._call(self._timeline, key)
        return timeline.as_of(at)

    async def rewind(self, key: ChatKey, to: str) -> int:
        """Hide the messages of the view after message ``to``; return how many
        (:meth:`storage.abilities.TimeTravelStorage.rewind`). The rewind is made at the
        store's clock.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidArgumentError: ``to`` is not a message of the current view, or the
                view's next message is a tool result answering a call at or before ``to``
                (hiding it would leave the call unanswered; nothing changed).
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key(key)
        check_message_id(to, "rewind: to")
        self._check_open()
        refuse_split_call(await self._call(self._timeline, key), to, "rewind", key)
        return await self._call(self._rewind, key, to, new_message_id(), self._now())

    async def fork(self, key: ChatKey, new_key: ChatKey, *, at: str | None = None) -> int:
        """Copy the view of ``key`` (up to and including message ``at``) into the empty
        ``new_key`` of the same user, with its checkpoint when one covers exactly that
        (:meth:`storage.abilities.TimeTravelStorage.fork`).

        Returns:
            How many messages were copied.

        Raises:
            InvalidKeyError: a key is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidArgumentError: ``new_key`` is ``key`` or of another user; ``at`` is not
                a message of ``key``.
            ConflictError: ``new_key`` holds messages (nothing copied).
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        self._check_open()
        return await fork_by_copy(self, key, new_key, at)

    async def provenance(self, key: ChatKey, message_id: str) -> ViewProvenance | None:
        """Always ``None``: a store serves its record as it is and records no view (a
        summarizing layer above it does). What the model was given for a reply saved
        straight to a store is the record before it (``fetch_as_of(key, seq - 1)``), or its
        newest ``limit`` when the caller fetched with one.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``message_id`` is not a non-empty str.
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        check_message_id(message_id, "provenance: message_id")
        self._check_open()
        return None
