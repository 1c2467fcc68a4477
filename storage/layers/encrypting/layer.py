"""``EncryptingChatStorage``: envelope encryption at rest, one data key per user.

See :mod:`storage.layers.encrypting` for the model; this module is the layer itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from typing import Final

from storage.abilities import (
    Abilities,
    CheckpointStorage,
    DescribableStorage,
    Head,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    TimeTravelStorage,
)
from storage.errors import ConfigError, InvalidKeyError
from storage.layers.encrypting.apart import check_apart, check_durable
from storage.layers.encrypting.cache import PlainCache, check_cache_chars
from storage.layers.encrypting.datakeys import DataKeys
from storage.layers.encrypting.keyring import Keyring, KeyringState, open_keyring
from storage.layers.encrypting.ledger import RESERVED_USER
from storage.layers.encrypting.master import MasterKeys, load_master_keys
from storage.layers.encrypting.records import RecordsAndVault
from storage.layers.encrypting.seam import Sealing
from storage.layers.encrypting.vault import PlaceholderVault
from storage.layers.payload import PayloadLayer
from storage.message import ChatKey, check_key_part
from storage.protocol import ChatStorage
from storage.telemetry import emit

__all__ = ["EncryptingChatStorage"]

_DEFAULT_CACHE_CHARS: Final = 32 * 1024 * 1024


class EncryptingChatStorage(RecordsAndVault, Sealing, PayloadLayer):
    """Encrypt every message, checkpoint and record before the inner store sees it.

    Envelope encryption with AES-256-GCM (the ``cryptography`` package): each user has one
    random 256-bit data key, created on the user's first save, kept only *wrapped* (encrypted
    by the newest master key) in a keyring apart from the data. ``delete_user`` destroys the
    user's entry there first (crypto-shredding: every copy of the user's ciphertext, in WAL
    files, free pages, replicas, backups or exports, becomes unreadable), then erases the
    user's data in the inner store.

    What stays clear, so indexes, ``limit`` windows, sessions and retention keep working: the
    key parts, message ids, roles, timestamps, the store's sequence, tool-call ids and
    ``tool_call_id`` (provider ids), record kinds and ids, and the summary marker of summary
    messages. Everything else is sealed (:mod:`storage.layers.encrypting.envelope`): content,
    parts, tool-call names and arguments, tool results, ``name``, ``metadata``, ``extra``,
    checkpoint messages and record data. Each ciphertext is bound to its conversation key and
    message id: a row copied to another user or conversation raises ``CorruptRecordError``.

    Abilities: heads and tails (decrypted), checkpoints (messages encrypted on save,
    decrypted on load), leases, replace and conditional saves, session listing, records
    (data encrypted), retention purge, key listing and time travel are offered (a ``fork``
    opens each message and the carried checkpoint with the source key and seals it again
    under the new key's associated data; a rewind touches no ciphertext); every message and record
    crosses the layer at one seam (:class:`~storage.layers.payload.PayloadLayer`, with the
    hooks of :mod:`.seam` and :mod:`.records`). Search is hidden: a store cannot search
    ciphertext, so a stack with this layer has no ``SearchableStorage``.

    The keyring is opened on first use and never created implicitly: a missing one is a
    ``KeyringMissingError`` (a ``StorageUnavailableError``) naming its location, unless
    ``create_keyring=True`` (or ``chatlayers keys init``) asks for one. A keyring older than
    the data (restored from a backup) or another keyring is refused
    (``KeyringMismatchError``); a value sealed with a key the keyring lacks is a
    ``DataKeyMissingError``, and only one whose key an erasure destroyed is a
    ``KeyErasedError``. Writes and erasures of a user never interleave: a write that lands
    after another process erased its user is undone and refused (``ConflictError``).

    Place it directly above the base store, below the scrubber
    (``summarize::scrub::encrypt::sqlite``): the scrubber must read plaintext to find PII,
    and the store must receive only ciphertext.

    Args:
        inner: the wrapped store.
        keyring: where wrapped data keys live: a file path or ``sqlite:///path`` (a SQLite
            file of its own with ``secure_delete``), any other store URL (``redis://...``,
            ``postgresql://...``), or a :class:`~storage.layers.encrypting.keyring.Keyring`.
            Required; refused when its file or directory is, lies inside or holds the
            data store's (whatever either store's type), or it is the data store's own
            Redis prefix or PostgreSQL table.
        key_env: the environment variable holding the master keys: one or more, newest
            first, comma-separated, each 32 random bytes in urlsafe base64 (``chatlayers
            keys new``). Default ``CHATLAYERS_MASTER_KEYS``.
        keys: the master keys themselves (code and tests; prefer ``key_env`` in config).
        cache_chars: budget of the decrypted-message cache, in characters of ciphertext
            (default 32 Mi); 0 disables it (every read decrypts).
        vault: keep the original value of each PII placeholder, encrypted under the user's
            data key, for :meth:`reveal` (give :attr:`vault` to ``PIIScrubber(vault=...)``).
        create_keyring: make the keyring on first use when there is none (default
            ``False``: a missing keyring is an error); never over a data store that holds
            data of another keyring.

    Raises:
        ConfigError: no or malformed master keys, both ``keys`` and ``key_env``, no keyring,
            a keyring overlapping the data store or lacking the keyring methods, a bad
            ``cache_chars`` or ``create_keyring``.
    """

    abilities = Abilities(
        passes=(ListableStorage, SessionListing),
        transforms=(
            DescribableStorage,
            SequencedStorage,
            CheckpointStorage,
            ReplaceableStorage,
            RecordStorage,
            RetentionStorage,
            TimeTravelStorage,
        ),
        hides=(SearchableStorage,),
    )

    def __init__(
        self,
        inner: ChatStorage,
        *,
        keyring: str | os.PathLike[str] | Keyring,
        key_env: str | None = None,
        keys: str | Sequence[str] | None = None,
        cache_chars: int = _DEFAULT_CACHE_CHARS,
        vault: bool = False,
        create_keyring: bool = False,
    ) -> None:
        super().__init__(inner)
        check_cache_chars(cache_chars)
        if type(create_keyring) is not bool:
            raise ConfigError(f"encrypt: create_keyring must be a bool, got {create_keyring!r}")
        self.masters: MasterKeys = load_master_keys(keys, key_env)
        if isinstance(keyring, str | os.PathLike):
            check_durable(os.fspath(keyring), inner)
            self.keyring: Keyring = open_keyring(os.fspath(keyring))
        elif keyring is None:
            raise ConfigError("encrypt: the keyring option is required")
        else:
            self.keyring = keyring
        check_apart(self.keyring, inner)
        self._keys = DataKeys(self.keyring, self.masters, inner, create=create_keyring)
        self._prefixes: dict[tuple[bytes, ChatKey], bytes] = {}
        self._cache = PlainCache(cache_chars)
        self.vault: PlaceholderVault | None = PlaceholderVault() if vault else None

    # --- ChatStorage (saves and reads go through the seam: PayloadLayer) ----------------

    async def delete(self, key: ChatKey) -> None:
        await self.inner.delete(key)
        self._cache.discard(key.user_id, key)
        if self.vault is not None:
            self.vault.drop(key)

    async def head(self, key: ChatKey) -> Head:
        """The inner store's :class:`~storage.abilities.Head` of ``key``, once the user's
        data key is known live (one keyring read, like every read of this layer): a cache
        above it (a summarizing worker's view) never serves what another process's erasure
        made unreadable, even when that erasure's store delete failed and no head changed.

        Raises:
            KeyErasedError: the record is sealed with a key an erasure destroyed (a
                ``delete_user`` failed part-way: call it again).
            DataKeyMissingError: it is sealed with a key the keyring lacks.
        """
        head = await self._below.head(key)
        if head.last_seq and await self._live(key.user_id) is None:
            await self.fetch_since(key, head.last_seq - 1)  # raises what a read raises
        return head

    async def delete_user(self, user_id: str) -> None:
        """Erase the user: destroy the data key first, leaving an erasure record (from then
        on no copy of the user's ciphertext can be read anywhere), then the user's data in
        the inner store. Waits for this instance's writes of the user in flight; a write of
        another process that lands after it is undone by that process.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part (or the reserved one).
            KeyringMissingError, KeyringMismatchError: no keyring, or not the data's
                (nothing erased).
            StorageUnavailableError: the keyring or the store cannot be reached. Retry:
                both steps are idempotent, so a retry after the key was destroyed but the
                data not yet deleted finishes the erasure (meanwhile the user's messages
                raise ``KeyErasedError``).
        """
        check_key_part("user_id", user_id)
        if user_id == RESERVED_USER:
            raise InvalidKeyError("encrypt: this user id is reserved for the keyring's records")
        gate = self._keys.gate
        await gate.begin_erasure(user_id)  # writes of this user in flight finish first
        try:
            await self._keys.destroy(user_id)
            emit("data_key_destroyed")
            self._cache.discard(user_id)
            if self.vault is not None:
                self.vault.drop_user(user_id)
            try:
                await self.inner.delete_user(user_id)
            except Exception as exc:
                exc.add_note(
                    f"encrypt: the data key of user {user_id!r} is already destroyed (the "
                    f"data is unreadable); call delete_user({user_id!r}) again to finish "
                    "deleting it"
                )
                raise
        finally:
            gate.end_erasure(user_id)

    async def aclose(self) -> None:
        self._cache.clear()
        self._keys.clear()
        try:
            await self.inner.aclose()
        finally:
            await self.keyring.aclose()

    # --- RetentionStorage ----------------------------------------------------------------

    async def purge(self, *, now: datetime | None = None) -> int:
        """Purge the inner store (timestamps are clear); the decrypted copies of what it
        deleted leave this process's cache too."""
        deleted: int = await self._below.purge(now=now)
        if deleted:
            self._cache.clear()
        return deleted

    # --- the keyring -----------------------------------------------------------------------

    async def keyring_state(self) -> KeyringState:
        """The keyring's id and generation, once checked against the data store.

        Raises:
            KeyringMissingError: no keyring (and ``create_keyring`` is off).
            KeyringMismatchError: an older copy, or another keyring than the data's.
        """
        return await self._keys.ready()

    async def init_keyring(self) -> tuple[bool, KeyringState]:
        """Make the keyring unless it exists (``chatlayers keys init``); ``(made, state)``.

        Raises:
            KeyringMissingError: the data store holds data of another keyring, missing
                here: no new keyring is made over it.
            KeyringMismatchError: the keyring exists but is not the data's.
        """
        return await self._keys.create()

    async def accept_keyring(self) -> tuple[KeyringState, KeyringState]:
        """Accept the keyring present as the data store's after the right one was lost for
        good (``chatlayers keys accept``): its generation moves past every one the store
        recorded, and its id is recorded. What was sealed with data keys it lacks stays
        unreadable (``DataKeyMissingError``); users erased after its backup are back in it
        and must be erased again. ``(before, after)``.

        Raises:
            KeyringMissingError: no keyring there.
        """
        before_after = await self._keys.accept()
        self._cache.clear()
        return before_after

    def describe(self) -> str:
        """The layer in one line: keyring location, master key count and the newest key's
        fingerprint (never a key)."""
        vault = ", vault" if self.vault is not None else ""
        return (
            f"EncryptingChatStorage(keyring={self.keyring.location}, "
            f"master keys={len(self.masters.keys)} from {self.masters.source}, "
            f"newest={self.masters.newest.fingerprint}{vault})"
        )
