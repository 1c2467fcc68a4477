"""The ``ReplaceableStorage`` templates: ``replace`` (compare-and-replace) and
``save_messages_if``."""

from __future__ import annotations

from collections.abc import Sequence

from storage.errors import ConflictError
from storage.history import prepare_batch, validate_history
from storage.message import ChatKey, ChatMessage
from storage.stores.base.core import MaybeAwaitable, StoreCore, check_key

__all__ = ["ReplaceTemplate", "conflict"]


def conflict(key: ChatKey, expected: object, found: str | None = None) -> ConflictError:
    """The error of a conditional write that found the key's version changed."""
    if found is None:
        return ConflictError(f"{key}: written since version {expected!r}; nothing stored")
    return ConflictError(f"{key}: version is {found!r}, not {expected!r}; nothing stored")


class ReplaceTemplate(StoreCore):
    """``replace`` and ``save_messages_if`` over the ``_replace`` and ``_save_messages_if``
    hooks. Both hooks compare ``Head.version`` with the expected one atomically with their
    write (in the same transaction, script or lock) and raise :func:`conflict` when it
    differs, having changed nothing."""

    def _replace(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str | None
    ) -> MaybeAwaitable[list[ChatMessage]]:
        """Make ``batch`` (a checked history, possibly empty) the key's whole record in a new
        epoch, dropping its checkpoint and keeping its records; only when ``expected_version``
        is ``None`` or the key's version."""
        raise NotImplementedError

    def _save_messages_if(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str
    ) -> MaybeAwaitable[list[ChatMessage]]:
        """Append ``batch`` (prepared, possibly empty) only if the key's version is
        ``expected_version``."""
        raise NotImplementedError

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        """Atomically replace the key's record with ``messages`` in a new epoch: the
        checkpoint is dropped, records stay (they are not messages).

        ``messages`` is checked with ``validate_history(messages, system="anywhere")`` (a
        record, like ``save``, may hold instruction messages mid-way). With
        ``expected_version`` (a ``Head.version`` read before), the record is replaced only if
        nobody wrote to it since, checked atomically with the write: an edit made from a read
        can never erase a message appended after that read.

        Returns:
            The messages as stored (an id repeated within ``messages`` once).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
            ConflictError: the key's version is not ``expected_version`` (nothing changed).
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key(key)
        batch = prepare_batch(validate_history(list(messages), system="anywhere"))
        if expected_version is not None and not isinstance(expected_version, str):
            raise conflict(key, expected_version)  # no version is like that
        self._check_open()
        return await self._call(self._replace, key, batch, expected_version)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """``save_messages`` only if ``head(key).version == expected_version``, checked
        atomically with the write (also when nothing is new).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidMessageError: a message breaks a rule (nothing stored).
            ConflictError: the key's version is not ``expected_version`` (nothing stored).
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key(key)
        batch = prepare_batch(messages)
        if not isinstance(expected_version, str):
            raise conflict(key, expected_version)  # no version is like that
        self._check_open()
        stored = await self._call(self._save_messages_if, key, batch, expected_version)
        if self.retention is not None and batch:
            await self._purge_if_due()
        return stored
