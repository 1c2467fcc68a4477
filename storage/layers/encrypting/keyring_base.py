"""What a keyring is: the :class:`Keyring` protocol and the values it keeps.

A keyring holds each user's data key, wrapped by a master key (:class:`WrappedKey`), plus
what makes a lost keyring distinguishable from an erasure:

- its *identity and generation* (:class:`KeyringState`): a random id made when the keyring
  is created, and a counter raised by every new data key and every erasure. The encrypting
  layer records the generation beside the data (:mod:`.ledger`), so a keyring restored from
  an older backup, or another deployment's keyring, is recognised and refused;
- *erasure records*: the id of every data key destroyed by ``delete_user`` (never the user
  id), so a reader can tell "this user was erased" from "this keyring lacks the key".

A keyring is never created implicitly: :meth:`Keyring.state` of a keyring that does not
exist raises :class:`~storage.layers.encrypting.errors.KeyringMissingError`, and only
:meth:`Keyring.create` makes one (``chatlayers keys init``, ``create_keyring=True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

__all__ = ["Keyring", "KeyringState", "WrappedKey"]


@attrs.frozen(repr=False)
class WrappedKey:
    """One user's data key as the keyring keeps it.

    Attributes:
        user_id: whose key.
        key_id: 16 hex digits naming this data key (tokens carry it).
        master: fingerprint of the master key that wrapped it.
        wrapped: nonce + AES-GCM ciphertext of the 32-byte data key.
    """

    user_id: str
    key_id: str
    master: str
    wrapped: bytes

    def __repr__(self) -> str:
        return f"WrappedKey({self.user_id!r}, key_id={self.key_id}, master={self.master})"


@attrs.frozen
class KeyringState:
    """Which keyring this is, and how far it has come.

    Attributes:
        keyring_id: 16 hex digits, random, made when the keyring was created (a restored
            backup keeps it; another keyring has another one).
        generation: raised by one for every data key added and every data key destroyed; a
            copy restored from an older backup has a lower one than the data recorded.
    """

    keyring_id: str
    generation: int


class Keyring(Protocol):
    """Where wrapped data keys live (one per user), with the keyring's state and erasure
    records. Built-in: :class:`~storage.layers.encrypting.keyring.SQLiteKeyring` and
    :class:`~storage.layers.encrypting.keyring.StoreKeyring`."""

    location: str

    async def state(self) -> KeyringState:
        """The keyring's id and generation.

        Raises:
            KeyringMissingError: there is no keyring at :attr:`location` (never created
                there, or its volume or server is not the one it was created on).
        """
        ...

    async def create(self) -> KeyringState:
        """Make the keyring if there is none (parents included); return its state. An
        existing keyring is left as it is."""
        ...

    async def create_if_absent(self) -> tuple[bool, KeyringState]:
        """:meth:`create`, saying whether this call made the keyring: of any number of
        callers racing, in any number of processes, one gets ``True`` (optional: without
        it, each caller that found no keyring counts as its maker)."""
        ...

    async def get(self, user_id: str) -> WrappedKey | None:
        """The user's entry, or ``None`` (never had one, or it was destroyed)."""
        ...

    async def add(self, entry: WrappedKey) -> WrappedKey:
        """Store ``entry`` unless the user has one already, raising the generation; return
        the one stored (the first writer wins, so concurrent processes agree on one key)."""
        ...

    async def rewrap(self, entry: WrappedKey, *, expected: WrappedKey) -> bool:
        """Replace the user's entry by ``entry`` (same ``key_id``) only if it is still
        ``expected``; ``False`` when it changed or was destroyed meanwhile."""
        ...

    async def rewrap_many(self, pairs: Sequence[tuple[WrappedKey, WrappedKey]]) -> int:
        """:meth:`rewrap` for each ``(entry, expected)`` pair, as one short write where the
        keyring can (rotation's batches); return how many were replaced."""
        ...

    async def destroy(self, user_id: str) -> str | None:
        """Erase the user's entry, keep an erasure record of its key id and raise the
        generation; return the destroyed key id (``None``: there was no entry)."""
        ...

    async def erased(self, key_id: str) -> bool:
        """Whether an erasure record says the data key ``key_id`` was destroyed."""
        ...

    async def owner(self, key_id: str) -> str | None:
        """The user whose live data key ``key_id`` is, or ``None`` (optional: tells a row
        copied from another user from a lost key)."""
        ...

    async def advance(self, generation: int) -> KeyringState:
        """Raise the generation to at least ``generation`` (accepting a restored keyring)."""
        ...

    async def entries(self) -> list[WrappedKey]:
        """Every entry, sorted by user id."""
        ...

    async def aclose(self) -> None: ...
