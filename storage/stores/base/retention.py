"""The ``RetentionStorage`` template (the purge hook and the purge on writes: ``core``)."""

from __future__ import annotations

from datetime import datetime

from storage.stores.base.core import StoreCore
from storage.stores.checks import check_now

__all__ = ["RetentionTemplate"]


class RetentionTemplate(StoreCore):
    """``purge`` over the ``_purge`` hook."""

    async def purge(self, *, now: datetime | None = None) -> int:
        """Delete messages older than ``now - retention`` (default ``now``: the store's
        clock), with the checkpoints of the keys they belonged to (each key touched starts a
        new epoch); records stay. What goes is widened by :func:`storage.purge.purge_mask`:
        tool groups go whole (never a result without its call, or a call without its
        results), and when the first message left would be the answer of a question that
        went, the messages up to the next user message go too, so the record still starts
        with a user turn.

        Returns:
            How many messages were deleted (0 when the store has no ``retention``).

        Raises:
            InvalidArgumentError: ``now`` is not a timezone-aware datetime.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        moment = check_now(now)
        self._check_open()
        if self.retention is None:
            return 0
        return await self._purge_now(moment if moment is not None else self._now())
