"""``EncryptingChatStorage``: envelope encryption at rest, one data key per user.

See :mod:`storage.layers.encrypting` for the model; this module is the layer itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import attrs
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage.abilities import (
    ConversationRecord,
    ForwardRetention,
    ForwardSessions,
    Head,
    SummaryCheckpoint,
    Tail,
)
from storage.errors import ConfigError
from storage.history import prepare_batch, validate_history
from storage.layers.encrypting.apart import check_apart, check_durable
from storage.layers.encrypting.cache import PlainCache
from storage.layers.encrypting.envelope import (
    CHECKPOINT,
    MESSAGE,
    RECORD,
    DataKey,
    KeyErasedError,
    aad_prefix,
    check_sealed,
    open_message,
    open_record,
    seal_message,
    seal_record,
    token_key_id,
    token_of_record,
)
from storage.layers.encrypting.keyring import Keyring, WrappedKey, open_keyring
from storage.layers.encrypting.master import MasterKeys, load_master_keys
from storage.layers.encrypting.vault import VAULT_KIND, PlaceholderVault, reveal_in
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import ChatStorage, ChatStorageWrapper
from storage.stores.base import check_key
from storage.stores.checks import check_checkpoint, check_record

__all__ = ["EncryptingChatStorage"]

_DEFAULT_CACHE_CHARS: Final = 32 * 1024 * 1024
_MAX_DATA_KEYS: Final = 4096


class EncryptingChatStorage(ForwardSessions, ForwardRetention, ChatStorageWrapper):
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

    Raises:
        ConfigError: no or malformed master keys, both ``keys`` and ``key_env``, no keyring,
            a keyring overlapping the data store, a bad ``cache_chars``.
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
    ) -> None:
        super().__init__(inner)
        if type(cache_chars) is not int or cache_chars < 0:
            raise ConfigError(f"encrypt: cache_chars must be an int >= 0, got {cache_chars!r}")
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
        self._data_keys: dict[str, tuple[WrappedKey, DataKey]] = {}
        self._prefixes: dict[tuple[bytes, ChatKey], bytes] = {}
        self._cache = PlainCache(cache_chars)
        self.vault: PlaceholderVault | None = PlaceholderVault() if vault else None

    # --- data keys -----------------------------------------------------------------------

    def _new_entry(self, user_id: str) -> WrappedKey:
        master = self.masters.newest
        key_id = os.urandom(8).hex()
        data_key = AESGCM.generate_key(bit_length=256)
        return WrappedKey(
            user_id, key_id, master.fingerprint, master.wrap(user_id, key_id, data_key)
        )

    def _unwrap(self, entry: WrappedKey) -> DataKey:
        master = self.masters.find(entry.master)
        if master is None:
            raise ConfigError(
                f"encrypt: the data key of user {entry.user_id!r} is wrapped by master key "
                f"{entry.master}, which {self.masters.source} does not hold (it holds "
                f"{', '.join(self.masters.fingerprints())}); keep an old master key after the "
                "new one until `chatlayers keys rotate` has re-wrapped every data key"
            )
        secret = master.unwrap(entry.user_id, entry.key_id, entry.wrapped)
        return DataKey(entry.user_id, entry.key_id, AESGCM(secret))

    async def _data_key(self, user_id: str, *, create: bool) -> DataKey | None:
        """The user's live data key (asked of the keyring on every call, so an erasure by
        another process is seen at once); created on a save when the user has none."""
        entry = await self.keyring.get(user_id)
        if entry is None:
            if not create:
                self._forget_user_key(user_id)
                return None
            entry = await self.keyring.add(self._new_entry(user_id))
        cached = self._data_keys.get(user_id)
        if cached is not None and cached[0] == entry:
            return cached[1]
        data_key = self._unwrap(entry)
        if len(self._data_keys) >= _MAX_DATA_KEYS:
            self._data_keys.clear()
        self._data_keys[user_id] = (entry, data_key)
        return data_key

    async def _writer(self, user_id: str) -> DataKey:
        data_key = await self._data_key(user_id, create=True)
        assert data_key is not None
        return data_key

    def _forget_user_key(self, user_id: str) -> None:
        if self._data_keys.pop(user_id, None) is not None:
            self._cache.discard(user_id)

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
    ) -> list[ChatMessage]:
        """Decrypt skeletons of ``key`` with the user's live data key (``None``: erased)."""
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
                raise _erased(key, skeleton.id, token_key_id(token), where)
            if prefix is None:
                prefix = self._prefix(domain, key)
            message = open_message(data_key, prefix, skeleton, token, where)
            if entries is not None:
                self._cache.add(token, key, data_key.key_id, message)
            append(message)
        return out

    async def _read(
        self, key: ChatKey, stored: list[ChatMessage], *, whole: bool = False
    ) -> list[ChatMessage]:
        if not stored:
            return []
        data_key = await self._data_key(key.user_id, create=False)
        if not whole or data_key is None:
            return self._open(data_key, key, stored)
        view = self._cache.views.get(key)
        if view is not None and view[0] == data_key.key_id:
            old_stored, old_plain = view[1], view[2]
            n = len(old_stored)
            # Identity first (list equality compares identical items without calling
            # __eq__): a store with a decode cache returns the very same skeletons.
            if n and len(stored) >= n and stored[0] is old_stored[0] and stored[:n] == old_stored:
                plain = (
                    old_plain + self._open(data_key, key, stored[n:])
                    if len(stored) > n
                    else list(old_plain)
                )
                self._cache.remember_view(key, data_key.key_id, stored, plain)
                return list(plain)
        plain = self._open(data_key, key, stored)
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
            StorageUnavailableError: the keyring or the store cannot be reached.
        """
        check_key(key)
        batch = prepare_batch(messages)
        if not batch:
            return []
        data_key = await self._writer(key.user_id)
        await self._flush_vault(key, data_key)
        stored: list[ChatMessage] = await self.inner.save_messages(
            key, self._seal(data_key, key, batch)
        )
        return self._as_stored(data_key, key, batch, stored)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        """The conversation decrypted (the inner store cuts the window: roles are clear).

        Raises:
            KeyErasedError: a message was sealed with a data key the keyring no longer holds
                (its user was erased; a restored copy), or copied from another user.
            CorruptRecordError: a message does not authenticate (altered, or copied from
                another conversation or message id) or is not encrypted.
            ConfigError: the data key is wrapped by a master key that is not configured.
        """
        stored = await self.inner.fetch(key, limit=limit)
        return await self._read(key, stored, whole=limit is None)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        """Every agent's messages of the session, decrypted, in the inner store's order.

        Raises:
            KeyErasedError, CorruptRecordError, ConfigError: as :meth:`fetch`.
        """
        rows = await self.inner.fetch_all_chats(user_id, session_id)
        if not rows:
            return []
        data_key = await self._data_key(user_id, create=False)
        keys: dict[str, ChatKey] = {}
        out: list[AgentMessage] = []
        for row in rows:
            key = keys.get(row.agent_id)
            if key is None:
                key = keys[row.agent_id] = ChatKey(user_id, session_id, row.agent_id)
            out.append(AgentMessage(row.agent_id, self._open(data_key, key, [row.message])[0]))
        return out

    async def delete(self, key: ChatKey) -> None:
        await self.inner.delete(key)
        self._cache.discard(key.user_id, key)
        if self.vault is not None:
            self.vault.drop(key)

    async def delete_user(self, user_id: str) -> None:
        """Erase the user: destroy the data key first (from then on no copy of the user's
        ciphertext can be read anywhere), then the user's data in the inner store.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            StorageUnavailableError: the keyring or the store cannot be reached. Retry:
                both steps are idempotent, so a retry after the key was destroyed but the
                data not yet deleted finishes the erasure (meanwhile the user's messages
                raise ``KeyErasedError``).
        """
        check_key_part("user_id", user_id)
        await self.keyring.destroy(user_id)
        self._data_keys.pop(user_id, None)
        self._cache.discard(user_id)
        if self.vault is not None:
            self.vault.drop_user(user_id)
        try:
            await self.inner.delete_user(user_id)
        except Exception as exc:
            exc.add_note(
                f"encrypt: the data key of user {user_id!r} is already destroyed (the data "
                f"is unreadable); call delete_user({user_id!r}) again to finish deleting it"
            )
            raise

    async def aclose(self) -> None:
        self._cache.clear()
        self._data_keys.clear()
        try:
            await self.inner.aclose()
        finally:
            await self.keyring.aclose()

    # --- SequencedStorage and CheckpointStorage ------------------------------------------

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

        Raises:
            KeyErasedError, CorruptRecordError: as :meth:`fetch`.
        """
        checkpoint: SummaryCheckpoint | None = await self._below.load_checkpoint(key)
        if checkpoint is None:
            return None
        data_key = await self._data_key(key.user_id, create=False)
        messages = self._open(data_key, key, checkpoint.messages, CHECKPOINT)
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
        data_key = await self._writer(key.user_id)
        prefix = self._prefix(CHECKPOINT, key)
        sealed = tuple(seal_message(data_key, prefix, m) for m in checked.messages)
        stored: SummaryCheckpoint | None = await self._below.save_checkpoint(
            key, attrs.evolve(checked, messages=sealed), expected_version=expected_version
        )
        if stored is None:
            return None
        messages = self._open(data_key, key, stored.messages, CHECKPOINT)
        return attrs.evolve(stored, messages=tuple(messages))

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        result: bool = await self._below.acquire_lease(key, owner, ttl)
        return result

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        await self._below.release_lease(key, owner)

    # --- ReplaceableStorage --------------------------------------------------------------

    async def replace(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Validate and encrypt ``messages``, then replace the inner record atomically.

        Raises:
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
        """
        check_key(key)
        batch = prepare_batch(validate_history(list(messages), system="anywhere"))
        data_key = await self._writer(key.user_id)
        await self._flush_vault(key, data_key)
        stored: list[ChatMessage] = await self._below.replace(key, self._seal(data_key, key, batch))
        self._cache.views.pop(key, None)
        return self._as_stored(data_key, key, batch, stored)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """Encrypt ``messages``, then save them if the key's version holds.

        Raises:
            ConflictError: the key's version is not ``expected_version`` (nothing stored).
        """
        check_key(key)
        batch = prepare_batch(messages)
        data_key = await self._writer(key.user_id)
        await self._flush_vault(key, data_key)
        stored: list[ChatMessage] = await self._below.save_messages_if(
            key, self._seal(data_key, key, batch), expected_version=expected_version
        )
        return self._as_stored(data_key, key, batch, stored)

    # --- RecordStorage -------------------------------------------------------------------

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """Encrypt the record's data (``kind``, ``id`` and times stay clear) and store it.

        Raises:
            InvalidArgumentError: empty ``kind`` or data that is not JSON-like.
        """
        check_key(key)
        check_record(record)
        data_key = await self._writer(key.user_id)
        return await self._save_record(data_key, key, record)

    async def _save_record(
        self, data_key: DataKey, key: ChatKey, record: ConversationRecord
    ) -> ConversationRecord:
        prefix = self._prefix(RECORD, key)
        stored: ConversationRecord = await self._below.save_record(
            key, seal_record(data_key, prefix, record)
        )
        return self._open_record(data_key, key, stored)

    def _open_record(
        self, data_key: DataKey | None, key: ChatKey, stored: ConversationRecord
    ) -> ConversationRecord:
        where = self._where(key)
        token = token_of_record(stored, where)
        if data_key is None or token_key_id(token) != data_key.key_id:
            raise _erased(key, stored.id, token_key_id(token), where)
        return open_record(data_key, self._prefix(RECORD, key), stored, token, where)

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        """The key's records, decrypted (the placeholder vault's own records are never
        among them)."""
        if kind == VAULT_KIND:
            return []
        stored: list[ConversationRecord] = await self._below.fetch_records(key, kind=kind)
        stored = [r for r in stored if r.kind != VAULT_KIND]
        if not stored:
            return []
        data_key = await self._data_key(key.user_id, create=False)
        return [self._open_record(data_key, key, record) for record in stored]

    # --- RetentionStorage ----------------------------------------------------------------

    async def purge(self, *, now: datetime | None = None) -> int:
        """Purge the inner store (timestamps are clear); the decrypted copies of what it
        deleted leave this process's cache too."""
        deleted: int = await self._below.purge(now=now)
        if deleted:
            self._cache.clear()
        return deleted

    # --- the placeholder vault -----------------------------------------------------------

    async def _flush_vault(self, key: ChatKey, data_key: DataKey) -> None:
        vault = self.vault
        if vault is None:
            return
        for record in vault.pending_records(key):
            await self._save_record(data_key, key, record)
            vault.done(key, record)

    async def reveal(self, key: ChatKey, value: Any) -> Any:
        """``value`` (a text or a ``ChatMessage`` of ``key``) with each PII placeholder
        replaced by the original value the vault keeps, for display to an authorised
        reader. Never called on a save or fetch path: what a model sees keeps placeholders.
        A placeholder the vault does not know (another conversation's, or its user was
        erased) stays as it is.

        Raises:
            ConfigError: the layer has no vault (``vault=True``).
        """
        if self.vault is None:
            raise ConfigError("encrypt: reveal needs the placeholder vault (vault=True)")
        check_key(key)
        await self._flush_vault_if_live(key)
        stored: list[ConversationRecord] = await self._below.fetch_records(key, kind=VAULT_KIND)
        originals: dict[str, str] = {}
        if stored:
            data_key = await self._data_key(key.user_id, create=False)
            if data_key is not None:
                for record in stored:
                    if token_key_id(token_of_record(record, self._where(key))) != data_key.key_id:
                        continue  # sealed before an erasure: shredded
                    data = self._open_record(data_key, key, record).data
                    originals[str(data["placeholder"])] = str(data["value"])
        return reveal_in(value, originals)

    async def _flush_vault_if_live(self, key: ChatKey) -> None:
        assert self.vault is not None
        if self.vault.has_pending(key):
            await self._flush_vault(key, await self._writer(key.user_id))

    def describe(self) -> str:
        """The layer in one line: keyring location, master key count and the newest key's
        fingerprint (never a key)."""
        vault = ", vault" if self.vault is not None else ""
        return (
            f"EncryptingChatStorage(keyring={self.keyring.location}, "
            f"master keys={len(self.masters.keys)} from {self.masters.source}, "
            f"newest={self.masters.newest.fingerprint}{vault})"
        )


def _erased(key: ChatKey, item_id: str, key_id: str, where: str) -> KeyErasedError:
    return KeyErasedError(
        f"{where}: {item_id!r} was sealed with data key {key_id}, which is not the current "
        f"data key of user {key.user_id!r}: the user was erased (the key destroyed, so "
        "this copy can never be read; if a delete_user of this user failed part-way, call "
        "it again to finish the erasure), or the row was copied from another user"
    )
