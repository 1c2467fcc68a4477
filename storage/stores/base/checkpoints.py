"""The ``CheckpointStorage`` templates: summary checkpoints (compare-and-set) and leases."""

from __future__ import annotations

from storage.abilities import SummaryCheckpoint
from storage.errors import InvalidArgumentError
from storage.message import ChatKey
from storage.stores.base.core import MaybeAwaitable, StoreCore, check_key
from storage.stores.checks import check_checkpoint, check_expected_version, check_lease

__all__ = ["CheckpointTemplate"]


class CheckpointTemplate(StoreCore):
    """Checkpoints and leases over the ``_load_checkpoint``, ``_save_checkpoint``,
    ``_acquire_lease`` and ``_release_lease`` hooks."""

    def _load_checkpoint(self, key: ChatKey) -> MaybeAwaitable[SummaryCheckpoint | None]:
        """The key's checkpoint of its current epoch, or ``None``; one that cannot be read
        is counted (``_derived_unusable``) and ignored."""
        raise NotImplementedError

    def _checkpoint_version(
        self, key: ChatKey, version: int
    ) -> MaybeAwaitable[SummaryCheckpoint | None]:
        """Version ``version`` (>= 1) of the key's checkpoint as stored, whatever its epoch,
        or ``None`` when it is not kept. This default knows only the current one; a store
        that keeps older versions (every built-in one) overrides it."""
        return self._current_version(key, version)

    async def _current_version(self, key: ChatKey, version: int) -> SummaryCheckpoint | None:
        current = await self._call(self._load_checkpoint, key)
        return current if current is not None and current.version == version else None

    def _save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, expected_version: int
    ) -> MaybeAwaitable[SummaryCheckpoint | None]:
        """Compare-and-set a checked checkpoint (messages validated, ``created_at`` UTC)."""
        raise NotImplementedError

    def _acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> MaybeAwaitable[bool]:
        """Take or extend the lease (``owner`` non-empty, ``ttl`` seconds > 0)."""
        raise NotImplementedError

    def _release_lease(self, key: ChatKey, owner: str) -> MaybeAwaitable[None]:
        """Drop the lease if ``owner`` (a non-empty str) holds it."""
        raise NotImplementedError

    async def load_checkpoint(
        self, key: ChatKey, *, version: int | None = None
    ) -> SummaryCheckpoint | None:
        """The key's checkpoint, or ``None`` (none, or made under another epoch).

        With ``version``: that version as stored, whatever its epoch (a checkpoint a later
        compaction replaced or a rewind voided), or ``None`` when it is not kept: versions
        are kept until a ``replace`` or a purge of the key renumbers its record (the version
        count starts again), or an erasure.

        A checkpoint that cannot be read (bad JSON or columns, a message that does not
        decode, another format version) is logged once, counted in ``corrupt_derived`` and
        ignored: ``None``, while :meth:`head` still reports its version, so the next
        compare-and-set replaces it.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidArgumentError: ``version`` is not an int >= 1.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key(key)
        if version is not None and (type(version) is not int or version < 1):
            raise InvalidArgumentError(f"version must be an int >= 1 or None, got {version!r}")
        self._check_open()
        if version is not None:
            return await self._call(self._checkpoint_version, key, version)
        return await self._call(self._load_checkpoint, key)

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Compare-and-set: store ``checkpoint`` as version ``expected_version + 1`` only if
        the current checkpoint's version is ``expected_version`` (0: none), its epoch is the
        key's current epoch and ``covers_to`` is the sequence number of a message the key
        holds, all checked atomically with the write.

        Returns:
            The checkpoint as stored (with its new version), or ``None`` when another writer
            won or the record changed (nothing written).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidArgumentError: a bad ``expected_version`` or checkpoint field.
            InvalidMessageError: a checkpoint message is invalid or not marked as a summary.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key(key)
        expected = check_expected_version(expected_version)
        checked = check_checkpoint(checkpoint)
        self._check_open()
        return await self._call(self._save_checkpoint, key, checked, expected)

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        """Take the key's summarizing lease for ``ttl`` seconds unless another owner holds an
        unexpired one; ``True`` when ``owner`` holds it now (re-acquiring extends it).

        Expiry is read on the store's clock (see the store: a server store without a
        ``clock`` uses the server's, which every worker shares).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidArgumentError: ``owner`` empty or ``ttl`` not seconds > 0.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key(key)
        seconds = check_lease(owner, ttl)
        self._check_open()
        return await self._call(self._acquire_lease, key, owner, seconds)

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        """Give the lease back if ``owner`` holds it (a no-op otherwise).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        check_key(key)
        self._check_open()
        if isinstance(owner, str) and owner:  # no lease has another owner
            await self._call(self._release_lease, key, owner)
