"""The ``RecordStorage`` templates."""

from __future__ import annotations

from datetime import UTC

import attrs

from storage.abilities import ConversationRecord
from storage.message import ChatKey
from storage.stores.base.core import MaybeAwaitable, StoreCore, check_key
from storage.stores.checks import check_record

__all__ = ["RecordsTemplate"]


class RecordsTemplate(StoreCore):
    """``save_record`` and ``fetch_records`` over the ``_save_record`` and
    ``_fetch_records`` hooks."""

    def _save_record(
        self, key: ChatKey, record: ConversationRecord
    ) -> MaybeAwaitable[ConversationRecord]:
        """Store a checked record whose ``created_at`` is set (UTC); the stored one when its
        id is stored already."""
        raise NotImplementedError

    def _fetch_records(
        self, key: ChatKey, kind: str | None
    ) -> MaybeAwaitable[list[ConversationRecord]]:
        """The key's records in store order, of ``kind`` (a non-empty str) or all."""
        raise NotImplementedError

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """Store ``record`` (a no-op returning the stored one when its id is stored already);
        its ``seq`` is taken from the key's message sequence, so it orders among them, and
        its ``created_at`` is the store's clock when it has none.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidArgumentError: empty ``kind`` or ``id``, or data that is not JSON-like.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key(key)
        check_record(record)
        self._check_open()
        at = record.created_at
        record = attrs.evolve(record, created_at=at.astimezone(UTC) if at else self._now())
        return await self._call(self._save_record, key, record)

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        """The key's records in store order, optionally of one ``kind`` only.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
            CorruptRecordError: a stored record cannot be decoded.
        """
        check_key(key)
        self._check_open()
        if kind is not None and (not isinstance(kind, str) or not kind):
            return []  # no record has such a kind
        return await self._call(self._fetch_records, key, kind)
