"""``RetentionStorage`` on PostgreSQL: delete messages older than the ``retention`` period.

``<table>_purge(before)`` locks the affected keys' rows in key order, deletes their old
messages (found through the ``created_at`` index), drops those keys' checkpoints, starts a
new epoch for each (so every cache of them is stale) and recomputes their session summaries;
a key left with no message and no record is removed. Writes call it automatically at most
once per ``purge_interval`` per store instance; ``chatlayers purge`` (or :meth:`purge`) runs
it now.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from storage.stores.checks import check_now
from storage.stores.postgres.core import PostgresCore

__all__ = ["RetentionMixin"]


class RetentionMixin(PostgresCore):
    """Retention purges."""

    async def purge(self, *, now: datetime | None = None) -> int:
        """Delete messages older than ``now - retention`` (default ``now``: the store's
        clock), with the checkpoints of the keys they belonged to.

        Returns:
            How many messages were deleted (0 when the store has no retention).

        Raises:
            InvalidArgumentError: ``now`` is not an aware datetime.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        when = check_now(now)
        if self.retention is None:
            return 0
        when = when or self._now()
        pool = self._pool or await self._get_pool()
        deleted = await self._purge_before(pool, when - timedelta(seconds=self.retention))
        self._last_purge = when
        return deleted
