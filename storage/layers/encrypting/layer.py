"""``EncryptingChatStorage``: envelope encryption at rest, one data key per user.

See :mod:`storage.layers.encrypting` for the model; this module is the layer itself.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

from storage.abilities import ForwardRetention, ForwardSessions
from storage.errors import ConfigError, InvalidKeyError
from storage.history import prepare_batch
from storage.layers.encrypting.abilities import SealedAbilities
from storage.layers.encrypting.apart import check_apart, check_durable
from storage.layers.encrypting.cache import PlainCache
from storage.layers.encrypting.datakeys import DataKeys
from storage.layers.encrypting.envelope import (
    MESSAGE,
    DataKey,
    aad_prefix,
    check_sealed,
    open_message,
    seal_message,
    token_key_id,
)
from storage.layers.encrypting.keyring import Keyring, KeyringState, open_keyring
from storage.layers.encrypting.ledger import RESERVED_USER
from storage.layers.encrypting.master import MasterKeys, load_master_keys
from storage.layers.encrypting.vault import PlaceholderVault
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import ChatStorage, ChatStorageWrapper
from storage.stores.base import check_key

__all__ = ["EncryptingChatStorage"]

_DEFAULT_CACHE_CHARS: Final = 32 * 1024 * 1024
T = TypeVar("T")


class _Foreign(Exception):
    """A value sealed with another key than the user's live one (resolved by the caller)."""


class EncryptingChatStorage(SealedAbilities, ForwardSessions, ForwardRetention, ChatStorageWrapper):
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
    (data encrypted), retention purge and key listing are forwarded. Search is not: a store
    cannot search ciphertext, so a stack with this layer has no ``SearchableStorage``.

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
        if type(cache_chars) is not int or cache_chars < 0:
            raise ConfigError(f"encrypt: cache_chars must be an int >= 0, got {cache_chars!r}")
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
        self._below: Any = inner
        self._keys = DataKeys(self.keyring, self.masters, inner, create=create_keyring)
        self._prefixes: dict[tuple[bytes, ChatKey], bytes] = {}
        self._cache = PlainCache(cache_chars)
        self.vault: PlaceholderVault | None = PlaceholderVault() if vault else None

    def _prefix(self, domain: bytes, key: ChatKey) -> bytes:
        prefix = self._prefixes.get((domain, key))
        if prefix is None:
            if len(self._prefixes) >= 4096:
                self._prefixes.clear()
            prefix = self._prefixes[(domain, key)] = aad_prefix(domain, key)
        return prefix

    # --- sealing and opening -------------------------------------------------------------

    def _seal(self, data_key: DataKey, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        prefix = self._prefix(MESSAGE, key)
        return [seal_message(data_key, prefix, message) for message in batch]

    def _as_stored(
        self,
        data_key: DataKey,
        key: ChatKey,
        batch: list[ChatMessage],
        stored: list[ChatMessage],
    ) -> list[ChatMessage]:
        """The plaintext of what the inner store reports stored (cached for the next read)."""
        plain = {message.id: message for message in batch}
        out: list[ChatMessage] = []
        for skeleton in stored:
            message = plain.get(skeleton.id)
            if message is None or message.created_at != skeleton.created_at:
                out.extend(self._open(data_key, key, [skeleton]))
                continue
            if type(skeleton.content) is str:
                self._cache.add(skeleton.content, key, data_key.key_id, message)
            out.append(message)
        return out

    def _where(self, key: ChatKey) -> str:
        return f"encrypt: {key}"

    def _open(
        self,
        data_key: DataKey | None,
        key: ChatKey,
        stored: Sequence[ChatMessage],
        domain: bytes = MESSAGE,
        skip: frozenset[str] = frozenset(),
    ) -> list[ChatMessage]:
        """Decrypt skeletons of ``key`` with the user's live data key (``None``: none);
        values sealed with a key in ``skip`` are left out.

        Raises:
            _Foreign: a value is sealed with another key (not in ``skip``).
        """
        live = data_key.key_id if data_key is not None else None
        entries = self._cache.entries if domain is MESSAGE else None
        out: list[ChatMessage] = []
        append = out.append
        prefix: bytes | None = None
        where = ""
        for skeleton in stored:
            token = skeleton.content
            if entries is not None and type(token) is str:
                hit = entries.get(token)
                if hit is not None and hit[1] == live and hit[0] == key:
                    message = hit[2]
                    if message.id == skeleton.id:
                        append(message)
                        continue
            if not where:
                where = self._where(key)
            token = check_sealed(skeleton, where)
            if data_key is None or token_key_id(token) != data_key.key_id:
                if token_key_id(token) in skip:
                    continue
                raise _Foreign(skeleton.id)
            if prefix is None:
                prefix = self._prefix(domain, key)
            message = open_message(data_key, prefix, skeleton, token, where)
            if entries is not None:
                self._cache.add(token, key, data_key.key_id, message)
            append(message)
        return out

    async def _open_all(
        self,
        data_key: DataKey | None,
        key: ChatKey,
        stored: Sequence[ChatMessage],
        domain: bytes = MESSAGE,
    ) -> list[ChatMessage]:
        """:meth:`_open`, resolving values sealed with other keys (skipped, or an error)."""
        try:
            return self._open(data_key, key, stored, domain)
        except _Foreign as foreign:
            skip = await self._skippable(data_key, key, stored, foreign.args[0])
            return self._open(data_key, key, stored, domain, skip)

    async def _skippable(
        self, data_key: DataKey | None, key: ChatKey, stored: Sequence[ChatMessage], first: str
    ) -> frozenset[str]:
        where = self._where(key)
        live = data_key.key_id if data_key is not None else None
        ids = {token_key_id(check_sealed(m, where)) for m in stored} - {live}
        return await self._keys.resolve(key, first, ids, data_key, where)

    async def _live(self, user_id: str) -> DataKey | None:
        """The user's live data key, asked of the keyring on every read (an erasure by
        another process is seen at once); ``None`` drops what this process cached."""
        keys = self._keys
        if keys.state is None:
            await keys.ready()
        entry = await self.keyring.get(user_id)
        if entry is None:
            if keys.forget(user_id):
                self._cache.discard(user_id)
            return None
        return keys.data_key(entry)

    async def _write(self, key: ChatKey, write: Callable[[DataKey], Awaitable[T]]) -> T:
        """Run ``write`` with the user's data key, serialized with erasures of the user and
        checked against the keyring once stored."""
        user_id = key.user_id
        gate = self._keys.gate
        if not gate.try_enter(user_id):
            await gate.enter(user_id)
        try:
            entry, data_key = await self._keys.writer(user_id)
            result = await write(data_key)
            await self._keys.after_write(key, entry)
        finally:
            gate.leave(user_id)
        return result

    async def _read(
        self, key: ChatKey, stored: list[ChatMessage], *, whole: bool = False
    ) -> list[ChatMessage]:
        if not stored:
            return []
        data_key = await self._live(key.user_id)
        if not whole or data_key is None:
            return await self._open_all(data_key, key, stored)
        view = self._cache.views.get(key)
        if view is not None and view[0] == data_key.key_id:
            old_stored, old_plain = view[1], view[2]
            n = len(old_stored)
            # Identity first (list equality compares identical items without calling
            # __eq__): a store with a decode cache returns the very same skeletons.
            if n and len(stored) >= n and stored[0] is old_stored[0] and stored[:n] == old_stored:
                plain = (
                    old_plain + await self._open_all(data_key, key, stored[n:])
                    if len(stored) > n
                    else list(old_plain)
                )
                self._cache.remember_view(key, data_key.key_id, stored, plain)
                return list(plain)
        plain = await self._open_all(data_key, key, stored)
        self._cache.remember_view(key, data_key.key_id, stored, plain)
        return list(plain)

    # --- ChatStorage ---------------------------------------------------------------------

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        return await self.save_messages(key, [message])

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        """Validate, seal and store a batch; return the plaintext messages as stored. The
        user's data key is created (and wrapped into the keyring) on their first save.

        Raises:
            InvalidMessageError: a message breaks a rule (nothing stored).
            ConfigError: the user's data key is wrapped by a master key not configured.
            ConflictError: the user was erased by another process while this save ran
                (nothing kept; saving again starts the user's new history).
            KeyringMissingError, KeyringMismatchError: no keyring, or not the data's.
            DataKeyMissingError: the user's data is sealed with a key the keyring lacks
                (refused, so nothing is saved beside unreadable messages).
            StorageUnavailableError: the keyring or the store cannot be reached.
        """
        check_key(key)
        batch = prepare_batch(messages)
        if not batch:
            return []
        user_id = key.user_id
        gate = self._keys.gate
        if not gate.try_enter(user_id):
            await gate.enter(user_id)
        try:
            entry, data_key = await self._keys.writer(user_id)
            if self.vault is not None:
                await self._flush_vault(key, data_key)
            stored: list[ChatMessage] = await self.inner.save_messages(
                key, self._seal(data_key, key, batch)
            )
            await self._keys.after_write(key, entry)
        finally:
            gate.leave(user_id)
        return self._as_stored(data_key, key, batch, stored)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        """The conversation decrypted (the inner store cuts the window: roles are clear).

        Messages sealed with a data key an erasure destroyed (left by a crash or a race
        with the erasure) are skipped once the user has a new key: a returning user's
        conversation reads.

        Raises:
            KeyErasedError: a message was sealed with a data key an erasure destroyed and
                the user has no new key (a restored copy of an erased user's data).
            DataKeyMissingError: a message was sealed with a data key the keyring lacks and
                no erasure record names (an older or another keyring; or a row copied from
                another user).
            KeyringMissingError, KeyringMismatchError: no keyring, or not the data's.
            CorruptRecordError: a message does not authenticate (altered, or copied from
                another conversation or message id) or is not encrypted.
            ConfigError: the data key is wrapped by a master key that is not configured.
        """
        stored = await self.inner.fetch(key, limit=limit)
        return await self._read(key, stored, whole=limit is None)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        """Every agent's messages of the session, decrypted, in the inner store's order.

        Raises:
            KeyErasedError, DataKeyMissingError, CorruptRecordError, ConfigError: as
                :meth:`fetch`.
        """
        rows = await self.inner.fetch_all_chats(user_id, session_id)
        if not rows:
            return []
        data_key = await self._live(user_id)
        keys: dict[str, ChatKey] = {}
        out: list[AgentMessage] = []
        skip: frozenset[str] = frozenset()
        for row in rows:
            key = keys.get(row.agent_id)
            if key is None:
                key = keys[row.agent_id] = ChatKey(user_id, session_id, row.agent_id)
            try:
                opened = self._open(data_key, key, [row.message], MESSAGE, skip)
            except _Foreign:
                skip |= await self._skippable(data_key, key, [row.message], row.message.id)
                opened = []
            if opened:
                out.append(AgentMessage(row.agent_id, opened[0]))
        return out

    async def delete(self, key: ChatKey) -> None:
        await self.inner.delete(key)
        self._cache.discard(key.user_id, key)
        if self.vault is not None:
            self.vault.drop(key)

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
