"""The encrypting layer's sequenced, checkpoint and replace abilities (a mixin of the layer).

Heads and leases pass through (they carry no message data); tails and checkpoints are opened
on the way up, checkpoints, replacements and conditional saves sealed on the way down, every
write through the layer's ``_write`` (serialized with erasures, checked after storing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from storage.abilities import Head, SummaryCheckpoint, Tail
from storage.errors import CorruptRecordError
from storage.history import prepare_batch, validate_history
from storage.layers.encrypting.envelope import (
    CHECKPOINT,
    MESSAGE,
    DataKey,
    KeyErasedError,
    seal_message,
)
from storage.layers.encrypting.records import RecordsAndVault
from storage.message import ChatKey, ChatMessage
from storage.stores.base import check_key
from storage.stores.checks import check_checkpoint
from storage.stores.derived import DerivedLog

if TYPE_CHECKING:
    from storage.layers.encrypting.cache import PlainCache

__all__ = ["SealedAbilities"]

T = TypeVar("T")


class SealedAbilities(RecordsAndVault):
    """``head``, ``fetch_since``, checkpoints, leases, ``replace`` and ``save_messages_if``."""

    _below: Any
    _cache: PlainCache
    _derived: DerivedLog | None = None

    @property
    def derived_log(self) -> DerivedLog:
        """Checkpoints this layer could not open and ignored (a derived record never hides
        the raw one), by kind; logged once per key (logger ``storage.stores.derived``)."""
        derived = self._derived
        if derived is None:
            derived = self._derived = DerivedLog()
        return derived

    @property
    def corrupt_derived(self) -> int:
        """How many times this layer ignored a checkpoint it could not open."""
        return self._derived.count if self._derived is not None else 0

    if TYPE_CHECKING:  # the layer's own

        def _seal(
            self, data_key: DataKey, key: ChatKey, batch: list[ChatMessage]
        ) -> list[ChatMessage]: ...

        def _as_stored(
            self,
            data_key: DataKey,
            key: ChatKey,
            batch: list[ChatMessage],
            stored: list[ChatMessage],
        ) -> list[ChatMessage]: ...

        def _open(
            self,
            data_key: DataKey | None,
            key: ChatKey,
            stored: Sequence[ChatMessage],
            domain: bytes = MESSAGE,
            skip: frozenset[str] = frozenset(),
        ) -> list[ChatMessage]: ...

        async def _open_all(
            self,
            data_key: DataKey | None,
            key: ChatKey,
            stored: Sequence[ChatMessage],
            domain: bytes = MESSAGE,
        ) -> list[ChatMessage]: ...

        async def _live(self, user_id: str) -> DataKey | None: ...

        async def _read(
            self, key: ChatKey, stored: list[ChatMessage], *, whole: bool = False
        ) -> list[ChatMessage]: ...

        async def _write(self, key: ChatKey, write: Callable[[DataKey], Awaitable[T]]) -> T: ...

        def describe(self) -> str: ...

    async def head(self, key: ChatKey) -> Head:
        result: Head = await self._below.head(key)
        return result

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        """The inner tail with its messages decrypted (sequence numbers and head as they are).

        Raises:
            InvalidArgumentError: ``after`` is not an int >= 0.
            KeyErasedError, CorruptRecordError: as :meth:`fetch`.
        """
        tail: Tail = await self._below.fetch_since(key, after)
        if not tail.messages:
            return tail
        messages = await self._read(key, list(tail.messages))
        return Tail(tail.head, tail.seqs, tuple(messages))

    async def load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        """The inner checkpoint with its summary messages decrypted, or ``None``.

        A checkpoint whose ciphertext does not open (tampered, truncated) is counted in
        :attr:`corrupt_derived`, logged once and ignored (``None``): the view is rebuilt from
        the raw record and the next compaction replaces it.

        Raises:
            KeyErasedError: as :meth:`fetch`.
        """
        checkpoint: SummaryCheckpoint | None = await self._below.load_checkpoint(key)
        if checkpoint is None:
            return None
        data_key = await self._live(key.user_id)
        try:
            messages = await self._open_all(data_key, key, checkpoint.messages, CHECKPOINT)
        except KeyErasedError:
            raise
        except CorruptRecordError as exc:
            # A checkpoint is derived: one that does not open never hides the record.
            self.derived_log.unreadable(self.describe(), "checkpoint", repr(key), exc)
            return None
        if len(messages) != len(checkpoint.messages):
            return None  # made before an erasure of the user: void
        return attrs.evolve(checkpoint, messages=tuple(messages))

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Encrypt each summary message (the summary marker stays clear), then
        compare-and-set the inner checkpoint.

        Raises:
            InvalidArgumentError: a malformed checkpoint (as the inner store).
            InvalidMessageError: a checkpoint message is invalid or not marked as a summary.
        """
        check_key(key)
        checked = check_checkpoint(checkpoint)

        async def write(data_key: DataKey) -> SummaryCheckpoint | None:
            prefix = self._prefix(CHECKPOINT, key)
            sealed = tuple(seal_message(data_key, prefix, m) for m in checked.messages)
            stored: SummaryCheckpoint | None = await self._below.save_checkpoint(
                key, attrs.evolve(checked, messages=sealed), expected_version=expected_version
            )
            if stored is None:
                return None
            messages = self._open(data_key, key, stored.messages, CHECKPOINT)
            return attrs.evolve(stored, messages=tuple(messages))

        return await self._write(key, write)

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        result: bool = await self._below.acquire_lease(key, owner, ttl)
        return result

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        await self._below.release_lease(key, owner)

    # --- ReplaceableStorage --------------------------------------------------------------

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        """Validate and encrypt ``messages``, then replace the inner record atomically.

        Raises:
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
        """
        check_key(key)
        batch = prepare_batch(validate_history(list(messages), system="anywhere"))

        async def write(data_key: DataKey) -> list[ChatMessage]:
            await self._flush_vault(key, data_key)
            sealed = self._seal(data_key, key, batch)
            stored: list[ChatMessage] = await self._below.replace(
                key, sealed, expected_version=expected_version
            )
            self._cache.views.pop(key, None)
            return self._as_stored(data_key, key, batch, stored)

        return await self._write(key, write)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """Encrypt ``messages``, then save them if the key's version holds.

        Raises:
            ConflictError: the key's version is not ``expected_version`` (nothing stored).
        """
        check_key(key)
        batch = prepare_batch(messages)

        async def write(data_key: DataKey) -> list[ChatMessage]:
            await self._flush_vault(key, data_key)
            stored: list[ChatMessage] = await self._below.save_messages_if(
                key, self._seal(data_key, key, batch), expected_version=expected_version
            )
            return self._as_stored(data_key, key, batch, stored)

        return await self._write(key, write)
