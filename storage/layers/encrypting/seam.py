"""The encrypting layer's payload hooks (a mixin of the layer): messages sealed on the way
down, opened on the way up (:class:`storage.layers.payload.PayloadLayer`).

Every write of a user runs inside the user's gate (:mod:`.gate`) with the user's data key
and is checked against the keyring once stored (``DataKeys.after_write``); every read asks
the keyring for the user's live key, so an erasure by another process is seen at once.
Values sealed with another key than the live one are skipped when an erasure destroyed it
and the user has a new one, and an error otherwise (``DataKeys.resolve``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from storage.abilities import mark_rewound, rewound_at
from storage.errors import CorruptRecordError
from storage.layers.encrypting.cache import PlainCache
from storage.layers.encrypting.datakeys import DataKeys
from storage.layers.encrypting.envelope import (
    CHECKPOINT,
    MESSAGE,
    DataKey,
    KeyErasedError,
    aad_prefix,
    check_sealed,
    open_message,
    seal_message,
    token_key_id,
)
from storage.layers.payload import Down, Send, Up
from storage.message import AgentMessage, ChatKey, ChatMessage
from storage.stores.derived import DerivedLog
from storage.telemetry import recorder, span

if TYPE_CHECKING:
    from storage.layers.encrypting.vault import PlaceholderVault
    from storage.layers.payload import Below

__all__ = ["Sealing"]

T = TypeVar("T")


class _Foreign(Exception):
    """A value sealed with another key than the user's live one (resolved by the caller)."""


class Sealing:
    """``_down``, ``_up`` and ``_up_session`` of the encrypting layer, and what they share
    with its records (sealing, opening, the gate)."""

    _below: Below
    _keys: DataKeys
    _cache: PlainCache
    _prefixes: dict[tuple[bytes, ChatKey], bytes]
    vault: PlaceholderVault | None
    _derived: DerivedLog | None = None

    if TYPE_CHECKING:  # the layer's own

        async def _flush_vault(self, key: ChatKey, data_key: DataKey) -> None: ...

        def describe(self) -> str: ...

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

    # --- the payload hooks -------------------------------------------------------------

    async def _down(
        self, key: ChatKey, messages: list[ChatMessage], what: Down, send: Send
    ) -> list[ChatMessage]:
        """Seal ``messages`` with the user's data key (made on the user's first save) and
        store them; the plaintext of what was stored.

        Raises:
            ConfigError: the user's data key is wrapped by a master key not configured.
            ConflictError: the user was erased by another process while this write ran
                (nothing kept; writing again starts the user's new history).
            KeyringMissingError, KeyringMismatchError: no keyring, or not the data's.
            DataKeyMissingError: the user's data is sealed with a key the keyring lacks.
        """
        user_id = key.user_id
        domain = CHECKPOINT if what == "checkpoint" else MESSAGE
        gate = self._keys.gate
        if not gate.try_enter(user_id):
            await gate.enter(user_id)
        try:
            entry, data_key = await self._keys.writer(user_id)
            if domain is MESSAGE and self.vault is not None:
                await self._flush_vault(key, data_key)
            with span("encrypt", key, messages=len(messages), what=what):
                sealed = self._seal(data_key, key, messages, domain)
            stored = await send(sealed)
            if what == "history":
                self._cache.views.pop(key, None)
            await self._keys.after_write(key, entry)
        finally:
            gate.leave(user_id)
        if domain is CHECKPOINT:
            return self._open(data_key, key, stored, CHECKPOINT)
        return self._as_stored(data_key, key, messages, stored)

    async def _up(self, key: ChatKey, messages: list[ChatMessage], what: Up) -> list[ChatMessage]:
        """Open what the store returned. Messages sealed with a data key an erasure
        destroyed (left by a crash or a race with the erasure) are skipped once the user has
        a new key. A checkpoint that does not open (tampered, truncated) is counted in
        :attr:`corrupt_derived`, logged once and left out: the view is rebuilt from the raw
        record and the next compaction replaces it.

        Raises:
            KeyErasedError: a message was sealed with a data key an erasure destroyed and
                the user has no new key (a restored copy of an erased user's data).
            DataKeyMissingError: a message was sealed with a data key the keyring lacks and
                no erasure record names (an older or another keyring; or a row copied from
                another user).
            CorruptRecordError: a message does not authenticate (altered, or copied from
                another conversation or message id) or is not encrypted.
            ConfigError: the data key is wrapped by a master key that is not configured.
        """
        if what != "checkpoint":
            if recorder() is None:
                return await self._read(key, messages, whole=what == "history")
            with span("decrypt", key, messages=len(messages), what=what) as handle:
                opened = await self._read(key, messages, whole=what == "history")
                handle.set("messages.opened", len(opened))
                return opened
        data_key = await self._live(key.user_id)
        try:
            return await self._open_all(data_key, key, messages, CHECKPOINT)
        except KeyErasedError:
            raise
        except CorruptRecordError as exc:
            # A checkpoint is derived: one that does not open never hides the record.
            self.derived_log.unreadable(self.describe(), "checkpoint", repr(key), exc)
            return []

    async def _up_session(
        self, user_id: str, session_id: str, rows: list[AgentMessage]
    ) -> list[AgentMessage]:
        """Every agent's messages of the session opened with one look at the user's key."""
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
                message = opened[0]
                when = rewound_at(row.message)  # the store's marker, on the skeleton
                if when is not None:
                    message = mark_rewound(message, when)
                out.append(AgentMessage(row.agent_id, message))
        return out

    # --- sealing and opening -----------------------------------------------------------

    def _prefix(self, domain: bytes, key: ChatKey) -> bytes:
        prefix = self._prefixes.get((domain, key))
        if prefix is None:
            if len(self._prefixes) >= 4096:
                self._prefixes.clear()
            prefix = self._prefixes[(domain, key)] = aad_prefix(domain, key)
        return prefix

    def _seal(
        self, data_key: DataKey, key: ChatKey, batch: list[ChatMessage], domain: bytes = MESSAGE
    ) -> list[ChatMessage]:
        prefix = self._prefix(domain, key)
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
        entry = await keys.keyring.get(user_id)
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
