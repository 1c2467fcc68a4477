"""``SequencedStorage`` on PostgreSQL: a key's head and its tail after a sequence number."""

from __future__ import annotations

from typing import Final

from storage.abilities import Head, Tail
from storage.codec import decode
from storage.message import ChatKey
from storage.stores.base import check_key
from storage.stores.checks import check_after
from storage.stores.postgres.core import PostgresCore
from storage.stores.postgres.text import key_args

__all__ = ["SequencedMixin"]

_EMPTY: Final = Head(0, "", 0)


def _head(last_seq: int, epoch: str, version: int) -> Head:
    # A key holding no message has no epoch (its row may exist for its records).
    return Head(int(last_seq), epoch, int(version)) if last_seq else _EMPTY


class SequencedMixin(PostgresCore):
    """Heads and tails: per-key sequence numbers follow commit order (the key's row lock)."""

    async def head(self, key: ChatKey) -> Head:
        """The key's head in one query: the indexed ``max(key_seq)``, the epoch, and the
        checkpoint's version (0 when none, or when it belongs to an older epoch);
        ``Head(0, "", 0)`` when the key holds no message.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        args = key_args(check_key(key))
        pool = self._pool or await self._get_pool()
        row = await pool.fetchrow(self._sql.head, *args)
        assert row is not None
        if row[0] and not row[1]:  # messages, but their key's row is lost: rebuild it
            await self._repair_key(key, "its key row is missing")
            row = await pool.fetchrow(self._sql.head, *args)
            assert row is not None
        return _head(row[0], row[1], row[2])

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        """Messages with ``seq > after`` and the head, in one statement (one snapshot): an
        indexed range read on ``(user_id, session_id, agent_id, key_seq)``.

        Raises:
            InvalidArgumentError: ``after`` is not an int >= 0.
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
            CorruptRecordError: a stored record cannot be decoded.
        """
        args = key_args(check_key(key))
        after = check_after(after)
        pool = self._pool or await self._get_pool()
        for attempt in range(2):
            rows = await pool.fetch(self._sql.fetch_since, *args, after)
            head = _EMPTY
            found: list[tuple[int, str]] = []
            lost = False
            for seq, record, last_seq, epoch, version in rows:
                if seq is None:
                    head = _head(last_seq, epoch, version)
                    lost = bool(last_seq) and not epoch
                else:
                    found.append((seq, record))
            if not lost or attempt:
                break
            await self._repair_key(key, "its key row is missing")
        found.sort(key=lambda row: row[0])  # in index order already: O(n)
        return Tail(
            head,
            tuple(seq for seq, _ in found),
            tuple(decode(record) for _, record in found),
        )
