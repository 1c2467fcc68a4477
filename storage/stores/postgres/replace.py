"""``ReplaceableStorage`` on PostgreSQL: replace a conversation, save only if unchanged.

Both are one call of ``<table>_save`` (one transaction under the key's row lock): replace
deletes the key's messages and checkpoint, starts a new epoch and inserts the new history
(its records stay, with their sequence numbers, which keep growing); a conditional save
compares the key's version after taking the lock and raises SQLSTATE ``CL409`` on a mismatch,
so nothing is stored.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.errors import ConflictError
from storage.history import prepare_batch, validate_history
from storage.message import ChatKey, ChatMessage
from storage.stores.base import check_key
from storage.stores.postgres.functions import CONFLICT_SQLSTATE
from storage.stores.postgres.sequenced import SequencedMixin

__all__ = ["ReplaceMixin"]


class ReplaceMixin(SequencedMixin):
    """Atomic replace and stale-writer detection."""

    async def replace(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Atomically replace the key's record with ``messages`` (checked with
        ``validate_history``); starts a new epoch and drops the checkpoint.

        Returns:
            The messages as stored (repeated ids within ``messages`` once).

        Raises:
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        check_key(key)
        batch = prepare_batch(validate_history(list(messages), system="anywhere"))
        return await self._write(key, batch, replace=True)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """``save_messages`` only if ``head(key).version == expected_version``.

        Raises:
            ConflictError: someone wrote since (nothing stored).
            InvalidMessageError: a message breaks a rule (nothing stored).
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        check_key(key)
        batch = prepare_batch(messages)
        conflict = ConflictError(
            f"{key} was written since version {expected_version!r}; nothing was stored"
        )
        if not isinstance(expected_version, str) or "\x00" in expected_version:
            raise conflict  # no version the store makes is like that
        if not batch:
            if (await self.head(key)).version != expected_version:
                raise conflict
            return []
        try:
            return await self._write(key, batch, expected=expected_version)
        except self._driver.PostgresError as exc:
            if getattr(exc, "sqlstate", None) == CONFLICT_SQLSTATE:
                raise conflict from None
            raise
