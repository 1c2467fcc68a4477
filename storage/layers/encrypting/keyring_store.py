""":class:`StoreKeyring`: wrapped data keys in a chatlayers store of their own.

For fleets sharing a server (``redis://...``, ``postgresql://...``) or a directory
(``jsonl://...``). Layout, as conversations of the keyring's store (session
``chatlayers-keyring``):

- ``(user, data-key)``: one message per wrapping of the user's data key, the newest one
  current (rotation appends the re-wrapped entry with a compare-and-set, so it can never
  undo an erasure; older wrappings go when the user is erased);
- ``(\\x1fchatlayers, meta)``: the keyring's id and generation, one message per generation,
  the newest current, each appended with a compare-and-set;
- ``(key id, erased)``: the erasure record of a destroyed data key (it names no user).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from typing import Any, Final

from storage.errors import ConflictError, CorruptRecordError
from storage.layers.encrypting.errors import CREATE_HINT, KeyringMissingError
from storage.layers.encrypting.keyring_base import KeyringState, WrappedKey
from storage.message import ChatKey, ChatMessage, check_key_part

__all__ = ["StoreKeyring"]

_SESSION: Final = "chatlayers-keyring"
_AGENT: Final = "data-key"
_META: Final = ChatKey("\x1fchatlayers", _SESSION, "meta")
_ERASED: Final = "erased"
_RETRIES: Final = 1000


def _ephemeral(store: Any) -> bool:
    """Whether the store keeps nothing past the process (``memory://``): such a keyring is
    made with the process, since no earlier one can exist."""
    seen: set[int] = set()
    while getattr(store, "inner", None) is not None and id(store) not in seen:
        seen.add(id(store))
        store = store.inner
    from storage.stores.memory import InMemoryChatStorage

    return isinstance(store, InMemoryChatStorage)


class StoreKeyring:
    """Wrapped data keys in a chatlayers store of their own (``redis://``,
    ``postgresql://``, ``jsonl://``, ``memory://``, ...): one conversation per user, one
    message per wrapping, the newest one current.

    The store must offer heads and conditional saves (every built-in store does): adding,
    re-wrapping and raising the generation are compare-and-set on a conversation's version,
    so two processes agree on one data key and a rotation can never bring back an erased
    one. A keyring in ``memory://`` is made with the process; any other one only by
    :meth:`create`.

    Args:
        store: the keyring's store (closed with the keyring).
        location: its URL, redacted (for messages).
    """

    def __init__(self, store: Any, location: str) -> None:
        self.store = store
        self.location = location
        self._ephemeral = _ephemeral(store)
        self._exists = False  # the identity record was seen: no need to look again

    @staticmethod
    def _key(user_id: str) -> ChatKey:
        return ChatKey(user_id, _SESSION, _AGENT)

    def _decode(self, user_id: str, message: ChatMessage) -> WrappedKey:
        try:
            data = json.loads(message.content if isinstance(message.content, str) else "")
            return WrappedKey(
                user_id, data["key_id"], data["master"], bytes.fromhex(data["wrapped"])
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRecordError(
                f"keyring {self.location}: the entry of {user_id!r} is malformed ({exc!r})"
            ) from None

    @staticmethod
    def _encode(entry: WrappedKey) -> ChatMessage:
        text = json.dumps(
            {"key_id": entry.key_id, "master": entry.master, "wrapped": entry.wrapped.hex()}
        )
        return ChatMessage("assistant", text, id=f"{entry.key_id}.{entry.master}")

    async def _current(self, user_id: str) -> tuple[str, WrappedKey | None]:
        key = self._key(user_id)
        tail = await self.store.fetch_since(key, 0)
        if not tail.messages:
            return tail.head.version, None
        return tail.head.version, self._decode(user_id, tail.messages[-1])

    # --- identity and generation ---------------------------------------------------------

    async def _meta(self) -> tuple[str, KeyringState | None]:
        # The newest record and the version it belongs to, in one snapshot.
        head = await self.store.head(_META)
        tail = await self.store.fetch_since(_META, max(0, head.last_seq - 1))
        if not tail.messages:
            return tail.head.version, None
        try:
            data = json.loads(str(tail.messages[-1].content))
            return tail.head.version, KeyringState(str(data["keyring"]), int(data["generation"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRecordError(
                f"keyring {self.location}: its identity record is malformed ({exc!r})"
            ) from None

    async def _write_meta(self, version: str, state: KeyringState) -> bool:
        text = json.dumps({"keyring": state.keyring_id, "generation": state.generation})
        message = ChatMessage("assistant", text, id=f"g{state.generation}")
        try:
            await self.store.save_messages_if(_META, [message], expected_version=version)
        except ConflictError:
            return False
        return True

    async def _move(self, generation: int | None) -> KeyringState:
        """Raise the generation by one (``None``) or to at least ``generation``."""
        for _ in range(_RETRIES):
            version, state = await self._meta()
            if state is None:
                state = await self._adopt_or_fail()
                continue
            target = state.generation + 1 if generation is None else generation
            if target <= state.generation:
                return state
            moved = KeyringState(state.keyring_id, target)
            if await self._write_meta(version, moved):
                return moved
        raise ConflictError(f"keyring {self.location}: its generation keeps changing; retry")

    async def _adopt_or_fail(self) -> KeyringState:
        """The state of a keyring without an identity record: made now when the keyring is
        ephemeral, or was made by an older release (it holds entries); else missing."""
        if not self._ephemeral:
            listed = await self.store.list_keys(session_id=_SESSION)
            if not any(key.agent_id == _AGENT for key in listed):
                raise KeyringMissingError(
                    f"encrypt: no keyring in {self.location}: its store holds no keyring "
                    f"(another server, database or prefix, or a server that lost its data?). "
                    f"{CREATE_HINT}"
                )
        return await self.create()

    async def state(self) -> KeyringState:
        _, state = await self._meta()
        if state is None:
            state = await self._adopt_or_fail()
        self._exists = True
        return state

    async def _check_exists(self) -> None:
        if not self._exists:
            await self.state()

    async def create(self) -> KeyringState:
        return (await self.create_if_absent())[1]

    async def create_if_absent(self) -> tuple[bool, KeyringState]:
        ours = os.urandom(8).hex()
        for _ in range(_RETRIES):
            version, state = await self._meta()
            if state is not None:
                self._exists = True
                # Made here only if the identity read back is ours: the first record is a
                # compare-and-set on the empty version, so one writer of any process lands.
                return state.keyring_id == ours, state
            await self._write_meta(version, KeyringState(ours, 1))
        raise ConflictError(f"keyring {self.location}: could not be created; retry")

    async def advance(self, generation: int) -> KeyringState:
        return await self._move(generation)

    # --- entries -------------------------------------------------------------------------

    async def get(self, user_id: str) -> WrappedKey | None:
        check_key_part("user_id", user_id)
        if not self._exists:
            await self._check_exists()
        messages = await self.store.fetch(self._key(user_id), limit=1)
        return self._decode(user_id, messages[-1]) if messages else None

    async def add(self, entry: WrappedKey) -> WrappedKey:
        await self._check_exists()
        version, current = await self._current(entry.user_id)
        if current is not None:
            return current
        await self._move(None)  # first: a copy of the keyring taken after it knows more
        with contextlib.suppress(ConflictError):  # another writer added one first: use theirs
            await self.store.save_messages_if(
                self._key(entry.user_id), [self._encode(entry)], expected_version=version
            )
        stored = await self.get(entry.user_id)
        if stored is None:
            raise ConflictError(f"keyring: the data key of {entry.user_id!r} was just erased")
        return stored

    async def rewrap(self, entry: WrappedKey, *, expected: WrappedKey) -> bool:
        version, current = await self._current(entry.user_id)
        if current != expected:
            return False
        try:
            await self.store.save_messages_if(
                self._key(entry.user_id), [self._encode(entry)], expected_version=version
            )
        except ConflictError:
            return False
        return True

    async def rewrap_many(self, pairs: Sequence[tuple[WrappedKey, WrappedKey]]) -> int:
        # No lock to keep short here: each entry is its own compare-and-set.
        done = 0
        for entry, expected in pairs:
            done += await self.rewrap(entry, expected=expected)
        return done

    async def destroy(self, user_id: str) -> str | None:
        check_key_part("user_id", user_id)
        await self._check_exists()
        _, current = await self._current(user_id)
        if current is None:
            # Nothing to destroy. Never delete here: another worker's first key for the user
            # may land between the read and a delete, and would go without an erasure record
            # (its data would read as lost, not erased).
            return None
        # The erasure record first: from then on the key reads as erased, never as lost.
        record = ChatMessage("assistant", "{}", id=_ERASED)
        await self.store.save_messages(ChatKey(current.key_id, _SESSION, _ERASED), [record])
        await self.store.delete(self._key(user_id))
        await self._move(None)
        return current.key_id

    async def erased(self, key_id: str) -> bool:
        return bool(await self.store.fetch(ChatKey(key_id, _SESSION, _ERASED), limit=1))

    async def owner(self, key_id: str) -> str | None:
        """The user whose live data key ``key_id`` is, or ``None`` (a scan of the entries:
        only a read that fails anyway asks)."""
        return next((e.user_id for e in await self.entries() if e.key_id == key_id), None)

    async def entries(self) -> list[WrappedKey]:
        keys = await self.store.list_keys(session_id=_SESSION)
        out = []
        for key in keys:
            if key.agent_id == _AGENT:
                entry = await self.get(key.user_id)
                if entry is not None:
                    out.append(entry)
        return out

    async def aclose(self) -> None:
        await self.store.aclose()
