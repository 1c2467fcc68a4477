"""``CheckpointStorage`` on PostgreSQL: one summary checkpoint per key, and leases.

A checkpoint is a row of ``<table>_checkpoints`` (never a row of the messages table, so
``fetch`` and ``fetch_all_chats`` never see it). Compare-and-set runs in one transaction
under the key's row lock (the lock every writer of the key takes): the epoch, ``covers_to``
and the current version are read after the lock is granted, so two workers can never both
win. A lease is a row of ``<table>_leases`` with an expiry: taken by one conditional upsert,
lost by a worker that dies holding it once the ttl has passed.

A checkpoint row whose record does not decode (bad JSON, the wrong shape, a message that
does not decode, another format version) is derived data: ``load_checkpoint`` logs it once,
counts it in ``corrupt_derived`` and returns ``None``, while the head still reports its
version, so the next compare-and-set replaces it.
"""

from __future__ import annotations

import json
from datetime import datetime

import attrs

from storage.abilities import SummaryCheckpoint
from storage.codec import decode, encode
from storage.errors import CorruptRecordError, SchemaVersionError
from storage.message import ChatKey
from storage.stores.base import check_key
from storage.stores.checks import check_checkpoint, check_expected_version, check_lease
from storage.stores.postgres.core import PostgresCore
from storage.stores.postgres.text import escape_column, key_args

__all__ = ["CheckpointMixin"]


_FORMAT = 1  # the record's "v" (records written before it had none: version 1)


def _encode_checkpoint(checkpoint: SummaryCheckpoint) -> str:
    return json.dumps(
        {
            "v": _FORMAT,
            "summarizer": checkpoint.summarizer,
            "messages": [encode(m) for m in checkpoint.messages],
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def _decode_checkpoint(
    version: int, epoch: str, covers_to: int, created_at: datetime, record: str
) -> SummaryCheckpoint:
    """Raises: CorruptRecordError: not a checkpoint record this store wrote."""
    try:
        data = json.loads(record)
        if data.get("v", _FORMAT) != _FORMAT:
            raise ValueError(f"unknown checkpoint format {data.get('v')!r}")
        summarizer = data["summarizer"]
        if not isinstance(summarizer, str) or not isinstance(data["messages"], list):
            raise TypeError("bad field types")
        messages = tuple(decode(text) for text in data["messages"])
    except (
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        RecursionError,
        CorruptRecordError,
        SchemaVersionError,
    ) as exc:
        raise CorruptRecordError(f"cannot decode stored checkpoint: {exc!r}") from exc
    return SummaryCheckpoint(
        messages,
        covers_to,
        epoch,
        summarizer,
        created_at,
        version,
    )


class CheckpointMixin(PostgresCore):
    """Summary checkpoints and summarizing leases."""

    async def load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        """The key's checkpoint, or ``None`` (also when it belongs to an older epoch).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        args = key_args(check_key(key))
        pool = self._pool or await self._get_pool()
        row = await pool.fetchrow(self._sql.load_checkpoint, *args)
        if row is None:
            return None
        try:
            return _decode_checkpoint(*row)
        except CorruptRecordError as exc:
            self._derived_unusable("checkpoint", key, exc)
            return None

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Compare-and-set: store ``checkpoint`` as version ``expected_version + 1`` only if
        the current checkpoint's version is ``expected_version`` (0: none), its epoch is the
        key's current epoch and ``covers_to`` is a sequence the raw record holds.

        Returns:
            The checkpoint as stored (with its new version), or ``None`` when another writer
            won or the record changed (nothing written).

        Raises:
            InvalidArgumentError: not a ``SummaryCheckpoint``, a bad ``covers_to``, epoch or
                ``expected_version``.
            InvalidMessageError: a checkpoint message is invalid or not marked as a summary.
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        args = key_args(check_key(key))
        checkpoint = check_checkpoint(checkpoint)
        expected = check_expected_version(expected_version)
        if "\x00" in checkpoint.epoch:
            return None  # no epoch the store makes holds NUL
        stored = attrs.evolve(checkpoint, version=expected + 1)
        record = _encode_checkpoint(stored)
        pool = self._pool or await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            epoch = await conn.fetchval(self._sql.lock_key, *args)
            if epoch != checkpoint.epoch:
                return None
            row = await conn.fetchrow(
                self._sql.checkpoint_state, *args, checkpoint.covers_to, epoch
            )
            assert row is not None
            holds, current = row[0], row[1] or 0
            if not holds or current != expected:
                return None
            await conn.execute(
                self._sql.upsert_checkpoint,
                *args,
                stored.version,
                stored.epoch,
                stored.covers_to,
                stored.created_at,
                record,
            )
        return stored

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        """Take the key's summarizing lease for ``ttl`` seconds unless another owner holds an
        unexpired one; ``True`` when ``owner`` holds it now (re-acquiring extends it).

        Expiry uses the store's ``clock`` when one was given, else the server's clock.

        Raises:
            InvalidArgumentError: ``owner`` is not a non-empty str, ``ttl`` not seconds > 0.
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        args = key_args(check_key(key))
        seconds = check_lease(owner, ttl)
        now = self._now() if self._clock is not None else None  # None: the server's clock
        pool = self._pool or await self._get_pool()
        won = await pool.fetchval(
            self._sql.acquire_lease, *args, escape_column(owner), seconds, now
        )
        return won is not None

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        """Give the lease back if ``owner`` holds it (a no-op otherwise).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        args = key_args(check_key(key))
        if not isinstance(owner, str) or not owner:
            return
        pool = self._pool or await self._get_pool()
        await pool.execute(self._sql.release_lease, *args, escape_column(owner))
