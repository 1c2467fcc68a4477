"""The encrypting layer's data keys: found, made, checked after every write, destroyed.

What keeps encryption from stranding data, in one place:

- **No implicit keyring.** The keyring is opened on first use; a missing one raises
  :class:`~.errors.KeyringMissingError` unless the layer was asked to create one
  (``create_keyring=True``), and even then never over a store that already holds data
  sealed with another keyring. An older or another keyring is refused (:mod:`.ledger`).
  One task of a process opens or makes it while the others wait, and of processes racing
  to make it one does (:meth:`~.keyring_base.Keyring.create_if_absent`): it is made, and
  announced, once.
- **Lost is not erased.** A value sealed with a key the keyring lacks is a
  ``KeyErasedError`` only when an erasure record names the key; otherwise it is a
  :class:`~.errors.DataKeyMissingError`, and no new key is made for that user (a save is
  refused) while their data is sealed with a key the keyring lacks.
- **Nothing sealed under a destroyed key is acknowledged.** Writes and erasures of a user
  are serialized within a process (:mod:`.gate`); across processes every write asks the
  keyring again once it is stored: if the key was destroyed meanwhile, the write is undone
  and refused with ``ConflictError``. The undo deletes the record only if all of it is sealed
  under erased keys, compared and deleted against the version it read, so a returning user's
  save landing meanwhile is never deleted. What such a race or a crash leaves behind is
  sealed under an erased key: once the user has a new key it is skipped on reads (it is
  erased data), so a returning user's conversation always reads.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Final

import anyio
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage.abilities import (
    ListableStorage,
    ReplaceableStorage,
    SequencedStorage,
    find_ability,
)
from storage.errors import (
    ChatStorageError,
    ConfigError,
    ConflictError,
    CorruptRecordError,
    InvalidKeyError,
)
from storage.keyed_locks import KeyedLocks
from storage.layers.encrypting.cipher import is_token, token_key_id
from storage.layers.encrypting.envelope import DataKey, KeyErasedError
from storage.layers.encrypting.errors import DataKeyMissingError, KeyringMissingError
from storage.layers.encrypting.gate import UserGate
from storage.layers.encrypting.keyring_base import Keyring, KeyringState, WrappedKey
from storage.layers.encrypting.ledger import RESERVED_USER, Ledger
from storage.layers.encrypting.master import MasterKeys
from storage.message import ChatKey, ChatMessage

__all__ = ["REQUIRED", "DataKeys", "erased_error"]

log = logging.getLogger("storage.layers.encrypting")

_MAX_DATA_KEYS: Final = 4096
_SAMPLE: Final = 64  # conversations looked at before a user gets a new data key
#: The methods a keyring must have (see :class:`~.keyring_base.Keyring`).
REQUIRED: Final = (
    "state",
    "create",
    "get",
    "add",
    "rewrap",
    "rewrap_many",
    "destroy",
    "erased",
    "advance",
    "entries",
    "aclose",
)


def erased_error(key: ChatKey, item_id: str, key_id: str, where: str) -> KeyErasedError:
    return KeyErasedError(
        f"{where}: {item_id!r} was sealed with data key {key_id}, destroyed when user "
        f"{key.user_id!r} was erased: this copy can never be read (if a delete_user of this "
        "user failed part-way, call it again to finish the erasure)"
    )


class DataKeys:
    """The data keys of one layer: its keyring, master keys and the store below it.

    Args:
        keyring: where the wrapped data keys are.
        masters: the configured master keys.
        below: the store under the layer (for the ledger and the checks of a user's data).
        create: make the keyring when there is none (see the module's docstring).
    """

    def __init__(self, keyring: Keyring, masters: MasterKeys, below: Any, *, create: bool) -> None:
        missing = [name for name in REQUIRED if not callable(getattr(keyring, name, None))]
        if missing:
            raise ConfigError(
                f"encrypt: the keyring {type(keyring).__name__} lacks {', '.join(missing)} "
                "(see storage.layers.encrypting.Keyring)"
            )
        self.keyring = keyring
        self.masters = masters
        self.gate = UserGate()
        self._below = below
        self._create = create
        self._ledger = Ledger(below, keyring.location)
        # In this process, one task opens (or makes) the keyring and one makes each user's
        # first key; the others wait and use the result instead of repeating it.
        self._opening = anyio.Lock()
        self._first_keys: KeyedLocks[str] = KeyedLocks()
        #: The keyring's state once checked against the store (``None``: not yet).
        self.state: KeyringState | None = None
        self._keys: dict[str, tuple[WrappedKey, DataKey]] = {}
        self._erased: dict[str, bool] = {}
        self._skipped: set[str] = set()

    # --- the keyring as a whole ------------------------------------------------------------

    async def ready(self) -> KeyringState:
        """The keyring's state once checked against the store (opened on first use).

        Raises:
            KeyringMissingError: no keyring there, and none may be created.
            KeyringMismatchError: an older or another keyring than the data's.
        """
        state = self.state
        if state is not None:
            return state
        async with self._opening:
            state = self.state
            if state is None:
                try:
                    state = await self.keyring.state()
                except KeyringMissingError:
                    if not self._create:
                        raise
                    state = (await self._make(announce=True))[1]
                await self._ledger.check(state, self.keyring.state)
                self.state = state
        return state

    async def create(self, *, announce: bool = False) -> tuple[bool, KeyringState]:
        """Make the keyring unless it exists; ``(made, state)``; ``announce`` logs a
        warning when it is made (``create_keyring=True``: an operator should know).

        Raises:
            KeyringMissingError: the data store holds data of another keyring (the one
                missing here): a new keyring would not read it, so none is made.
        """
        async with self._opening:
            return await self._make(announce=announce)

    async def _make(self, *, announce: bool) -> tuple[bool, KeyringState]:
        try:
            state = await self.keyring.state()
        except KeyringMissingError as missing:
            try:
                await self._refuse_new_keyring(missing)
            except KeyringMissingError:
                try:  # another process may have just made it (and written to the store)
                    state = await self.keyring.state()
                except KeyringMissingError:
                    pass
                else:
                    await self._ledger.check(state, self.keyring.state)
                    return False, state
                raise
            made, state = await self._create_keyring()
            if made:
                await self._ledger.record(state)
                if announce:
                    log.warning("encrypt: created the keyring %s", self.keyring.location)
                return True, state
            # Another process made it since we looked: check it like a keyring found here.
        await self._ledger.check(state, self.keyring.state)
        await self._ledger.record(state)
        return False, state

    async def _create_keyring(self) -> tuple[bool, KeyringState]:
        create_if_absent = getattr(self.keyring, "create_if_absent", None)
        if create_if_absent is None:  # a keyring that cannot tell: whoever found none made it
            return True, await self.keyring.create()
        made, state = await create_if_absent()
        return bool(made), state

    async def _refuse_new_keyring(self, missing: KeyringMissingError) -> None:
        ids = await self._ledger.keyring_ids()
        found = (
            f"written with keyring {', '.join(sorted(ids))}"
            if ids
            else next(
                (
                    f"already holding encrypted conversations ({key})"
                    for key, message in await self._newest_of(None, 1)
                    if is_token(message.content)
                ),
                None,
            )
        )
        if found is not None:
            raise KeyringMissingError(
                f"encrypt: the keyring {self.keyring.location} is missing, over a data store "
                f"{found}: no new keyring is made over data sealed with another, since it "
                "could not read it. Mount or restore that keyring"
            ) from missing

    async def accept(self) -> tuple[KeyringState, KeyringState]:
        """Make the present keyring the store's, past every generation the store recorded;
        ``(before, after)``.

        Raises:
            KeyringMissingError: there is no keyring there.
        """
        async with self._opening:  # a first use meanwhile would keep the state before
            before = await self.keyring.state()
            newest = await self._ledger.newest(before.generation)
            target = max(before.generation, newest[0] if newest else 0) + 1
            after = await self.keyring.advance(target)
            await self._ledger.record(after)
            self.state = None
            self._keys.clear()
        return before, after

    # --- one user's key --------------------------------------------------------------------

    def _unwrap(self, entry: WrappedKey) -> DataKey:
        master = self.masters.find(entry.master)
        if master is None:
            # Met by a worker not given the new key before a rotation, more often than by
            # one whose old key was dropped too soon: name both, the rotation first.
            source = self.masters.source
            raise ConfigError(
                f"encrypt: the data key of user {entry.user_id!r} is wrapped by master key "
                f"{entry.master}, which {source} of this process does not hold (it holds "
                f"{', '.join(self.masters.fingerprints())}). If `chatlayers keys rotate` "
                f"moved the keyring to {entry.master}, this worker was not given that new "
                f"key: set {source} to NEW,OLD (the new key first, then the ones it holds) "
                "and restart it; every worker needs NEW,OLD before a rotation. If "
                f"{entry.master} is an old key instead, it was dropped too soon: put it back "
                "after the newest until `chatlayers keys rotate` has re-wrapped every data key"
            )
        secret = master.unwrap(entry.user_id, entry.key_id, entry.wrapped)
        return DataKey(entry.user_id, entry.key_id, AESGCM(secret))

    def data_key(self, entry: WrappedKey) -> DataKey:
        """The unwrapped data key of ``entry`` (cached while the entry is unchanged)."""
        cached = self._keys.get(entry.user_id)
        if cached is not None and cached[0] == entry:
            return cached[1]
        data_key = self._unwrap(entry)
        if len(self._keys) >= _MAX_DATA_KEYS:
            self._keys.clear()
        self._keys[entry.user_id] = (entry, data_key)
        return data_key

    def clear(self) -> None:
        """Drop every cached data key (the layer is closing)."""
        self._keys.clear()

    def forget(self, user_id: str) -> bool:
        """Drop the user's cached key; whether one was cached."""
        return self._keys.pop(user_id, None) is not None

    async def live(self, user_id: str) -> DataKey | None:
        """The user's live data key (asked of the keyring on every call, so an erasure by
        another process is seen at once), or ``None``."""
        if self.state is None:
            await self.ready()
        entry = await self.keyring.get(user_id)
        return None if entry is None else self.data_key(entry)

    async def writer(self, user_id: str) -> tuple[WrappedKey, DataKey]:
        """The user's data key for a write, made on their first save.

        Raises:
            InvalidKeyError: the user id is the ledger's.
            DataKeyMissingError: the user has data sealed with a key the keyring lacks.
        """
        if self.state is None:
            await self.ready()
        entry = await self.keyring.get(user_id)
        if entry is None:
            # Each attempt may raise the generation (a keyring in a store raises it before
            # its compare-and-set): the user's other saves here wait and take the key made.
            async with self._first_keys.hold(user_id):
                entry = await self.keyring.get(user_id)
                if entry is None:
                    entry = await self._new_key(user_id)
        return entry, self.data_key(entry)

    async def _new_key(self, user_id: str) -> WrappedKey:
        if user_id == RESERVED_USER:
            raise InvalidKeyError("encrypt: this user id is reserved for the keyring's records")
        await self._refuse_stranded(user_id)
        master = self.masters.newest
        key_id = os.urandom(8).hex()
        secret = AESGCM.generate_key(bit_length=256)
        entry = await self.keyring.add(
            WrappedKey(user_id, key_id, master.fingerprint, master.wrap(user_id, key_id, secret))
        )
        # Recorded before anything is sealed under it: an older keyring is then refused.
        await self._ledger.record(await self.keyring.state())
        return entry

    async def _newest_of(self, user_id: str | None, most: int) -> list[tuple[ChatKey, ChatMessage]]:
        """The newest stored message of up to ``most`` conversations (of ``user_id``)."""
        listing = find_ability(self._below, ListableStorage)
        if listing is None:
            return []
        keys = await listing.list_keys(user_id)
        sequenced = find_ability(self._below, SequencedStorage)
        out: list[tuple[ChatKey, ChatMessage]] = []
        for key in keys[:most]:
            tail: tuple[ChatMessage, ...] = ()
            if sequenced is not None:
                head = await sequenced.head(key)
                tail = (await sequenced.fetch_since(key, max(0, head.last_seq - 1))).messages
            if not tail:  # no sequence numbers, or the newest hidden by a rewind
                tail = tuple(await self._below.fetch(key, limit=5))
            if tail:
                out.append((key, tail[-1]))
        return out

    async def _refuse_stranded(self, user_id: str) -> None:
        """Refuse a new key while the user's data is sealed with one the keyring lacks
        (neither live nor erased): what is saved now would sit beside unreadable messages."""
        for key, message in await self._newest_of(user_id, _SAMPLE):
            if is_token(message.content):
                key_id = token_key_id(str(message.content))
                if not await self.is_erased(key_id):
                    # Another writer may have made the user's first key meanwhile (its
                    # message is sealed with it): then add() returns that key.
                    live = await self.keyring.get(user_id)
                    if live is not None and live.key_id == key_id:
                        return
                    raise self.missing(key, message.id, key_id, f"encrypt: {key}", saving=True)

    async def is_erased(self, key_id: str) -> bool:
        """Whether an erasure record names ``key_id`` (remembered: erasure is final)."""
        known = self._erased.get(key_id)
        if known:
            return True
        erased = await self.keyring.erased(key_id)
        if erased:
            if len(self._erased) >= _MAX_DATA_KEYS:
                self._erased.clear()
            self._erased[key_id] = True
        return erased

    def missing(
        self, key: ChatKey, item_id: str, key_id: str, where: str, *, saving: bool = False
    ) -> DataKeyMissingError:
        what = (
            f"a save for user {key.user_id!r} is refused: their data" if saving else f"{item_id!r}"
        )
        return DataKeyMissingError(
            f"{where}: {what} is sealed with data key {key_id}, which the keyring "
            f"{self.keyring.location} does not hold and no erasure record names: the keyring "
            "is not the one this data was written with, or an older copy of it. Nothing is "
            "lost yet: mount or restore the "
            "keyring that holds the key. If it is lost for good, the user's messages sealed "
            f"with it cannot be read: delete_user({key.user_id!r}) (`chatlayers delete "
            "--user`) lets the user start again"
        )

    # --- writes and erasures ---------------------------------------------------------------

    async def after_write(self, key: ChatKey, entry: WrappedKey) -> None:
        """Check that the key a write sealed under is still live; if another process
        destroyed it meanwhile, undo the write and refuse it.

        Raises:
            ConflictError: the user was erased while the write ran (nothing kept).
        """
        current = await self.keyring.get(entry.user_id)
        if current is not None and current.key_id == entry.key_id:
            return
        self.forget(entry.user_id)
        refused = ConflictError(
            f"encrypt: {key}: user {key.user_id!r} was erased while this write ran; nothing "
            "was kept (save again to start the user's new history)"
        )
        try:
            await self._undo(key)
        except ChatStorageError as exc:
            # What was written is sealed under a destroyed key: unreadable, skipped once the
            # user has a new key, removed by the next delete_user.
            log.warning("encrypt: %s: undoing a write that raced an erasure failed: %s", key, exc)
            raise refused from exc
        raise refused

    async def _undo(self, key: ChatKey) -> None:
        """Delete ``key``'s record when every message of it is sealed under a key an erasure
        destroyed, and nobody wrote to it since that was read: a returning user's messages
        are never touched (leftovers are skipped on reads instead).

        The delete is a compare-and-replace with the version of the read (``replace(key, [],
        expected_version=...)``): a third writer saving under the user's new key between
        the read and the delete makes it a no-op. A store without that ability only gets the
        delete while the user has no live key (a narrower race, documented)."""
        sequenced = find_ability(self._below, SequencedStorage)
        replaceable = find_ability(self._below, ReplaceableStorage)
        if sequenced is None or replaceable is None:
            if await self.keyring.get(key.user_id) is None and await self._all_erased(
                tuple(await self._below.fetch(key))
            ):
                await self._below.delete(key)
            return
        tail = await sequenced.fetch_since(key, 0)
        if not tail.messages or not await self._all_erased(tail.messages):
            return
        try:
            await replaceable.replace(key, [], expected_version=tail.head.version)
        except ConflictError:
            return  # written since the read: what it holds under the erased key is skipped

    async def _all_erased(self, messages: tuple[ChatMessage, ...]) -> bool:
        """Whether every message is sealed under a key an erasure record names."""
        for message in messages:
            if not is_token(message.content):
                return False
            if not await self.is_erased(token_key_id(str(message.content))):
                return False
        return True

    async def destroy(self, user_id: str) -> None:
        """Destroy the user's data key (with an erasure record) and record the keyring's
        new generation in the store."""
        if self.state is None:
            await self.ready()
        destroyed = await self.keyring.destroy(user_id)
        self.forget(user_id)
        if destroyed is not None:
            self._erased[destroyed] = True
            await self._ledger.record(await self.keyring.state())

    # --- reads of values sealed under other keys -------------------------------------------

    async def resolve(
        self, key: ChatKey, item_id: str, key_ids: set[str], live: DataKey | None, where: str
    ) -> frozenset[str]:
        """The key ids among ``key_ids`` (not the live one) whose values a read skips:
        keys an erasure destroyed, once the user has a new key.

        Raises:
            KeyErasedError: a key was destroyed by an erasure and the user has no new key.
            DataKeyMissingError: a key the keyring lacks that no erasure record names.
        """
        for key_id in sorted(key_ids):
            if not await self.is_erased(key_id):
                owner = getattr(self.keyring, "owner", None)
                if owner is not None and await owner(key_id) not in (None, key.user_id):
                    raise CorruptRecordError(
                        f"{where}: {item_id!r} is sealed with another user's data key: the "
                        "row was copied from another user's conversation"
                    )
                raise self.missing(key, item_id, key_id, where)
        if live is None:
            raise erased_error(key, item_id, min(key_ids), where)
        for key_id in key_ids - self._skipped:
            self._skipped.add(key_id)
            log.warning(
                "%s: skipping values sealed with data key %s, destroyed by an erasure of "
                "the user before their current key was made",
                where,
                key_id,
            )
        return frozenset(key_ids)
