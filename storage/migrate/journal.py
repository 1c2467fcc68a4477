"""What a mirror's secondary missed: durable marks, one conversation per mark, in a store.

A ``mirror`` layer that could not write to its secondary records a *mark*: a conversation
(``("key", user, session, agent)``), a user (``("user", user)``: a missed ``delete_user``)
or a purge (``("purge", when)``). Marks live in a store the primary's workers share (by
default the primary's own base store), so they survive a restart of the worker that made
them and every worker of a fleet (and ``chatlayers migrate``) can repair them:

- one mark is the key ``(JOURNAL_USER, <secondary name>, <the mark as JSON>)``; each miss
  appends one small message to it (a fixed text: the mark is in the key, which no layer
  rewrites), so every miss changes the key's version;
- :meth:`Journal.clear` empties it with compare-and-replace on the version read *before*
  the repair started: a miss recorded while the repair ran changes the version, the clear
  is refused and the mark stays (nothing a repair did not see is ever forgotten);
- :meth:`Journal.marks` lists them (``list_keys`` of the journal user and the secondary's
  name: one indexed read).

User ids starting with :data:`RESERVED_PREFIX` are the layers' own bookkeeping (this
journal, the encrypting layer's keyring records): migration and verification skip them and
the mirror does not list them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Final, Literal

import attrs

from storage.abilities import ListableStorage, ReplaceableStorage, SequencedStorage, find_ability
from storage.errors import ConfigError, ConflictError
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage

__all__ = ["JOURNAL_USER", "RESERVED_PREFIX", "Journal", "Mark", "is_reserved"]

RESERVED_PREFIX: Final = "\x1fchatlayers"
"""User ids starting with this are the layers' own records, never a user's."""
JOURNAL_USER: Final = RESERVED_PREFIX + ".mirror"
"""The user id of the mirror's marks."""
_TEXT: Final = "the mirror's secondary missed a write here; it is repaired from the primary"

MarkKind = Literal["key", "user", "purge"]


def is_reserved(user_id: str) -> bool:
    """Whether ``user_id`` belongs to the layers' own bookkeeping (see the module)."""
    return user_id.startswith(RESERVED_PREFIX)


@attrs.frozen
class Mark:
    """What the secondary missed: a conversation, a user's erasure or a purge.

    Attributes:
        kind: ``"key"``, ``"user"`` or ``"purge"``.
        key: the conversation (``kind="key"``).
        user_id: the user (``kind="user"``).
        at: the purge's ``now`` (``kind="purge"``, UTC).
    """

    kind: MarkKind
    key: ChatKey | None = None
    user_id: str | None = None
    at: datetime | None = None

    @classmethod
    def of_key(cls, key: ChatKey) -> Mark:
        return cls("key", key=key)

    @classmethod
    def of_user(cls, user_id: str) -> Mark:
        return cls("user", user_id=user_id)

    @classmethod
    def of_purge(cls, at: datetime) -> Mark:
        return cls("purge", at=at.astimezone(UTC))

    def encode(self) -> str:
        """The mark as the journal key's agent id (JSON)."""
        if self.key is not None:
            parts: list[str] = ["key", self.key.user_id, self.key.session_id, self.key.agent_id]
        elif self.user_id is not None:
            parts = ["user", self.user_id]
        else:
            assert self.at is not None
            parts = ["purge", self.at.isoformat()]
        return json.dumps(parts, ensure_ascii=False)

    @classmethod
    def decode(cls, text: str) -> Mark | None:
        """The mark a journal agent id holds, or ``None`` when it holds none."""
        try:
            parts: Any = json.loads(text)
            if parts[0] == "key" and len(parts) == 4:
                return cls.of_key(ChatKey(parts[1], parts[2], parts[3]))
            if parts[0] == "user" and len(parts) == 2 and isinstance(parts[1], str):
                return cls.of_user(parts[1])
            if parts[0] == "purge" and len(parts) == 2:
                return cls.of_purge(datetime.fromisoformat(parts[1]))
        except (ValueError, TypeError, IndexError, KeyError):
            pass
        return None

    def describe(self) -> str:
        if self.key is not None:
            return f"conversation {self.key}"
        if self.user_id is not None:
            return f"erasure of user {self.user_id!r}"
        assert self.at is not None
        return f"purge at {self.at.isoformat()}"


class Journal:
    """The marks of one secondary (``name``) in ``store``.

    Args:
        store: where the marks live: a store that can list its keys (and, for the safe
            clear, tell a key's version and replace it: every built-in store can).
        name: the secondary's name (its URL without the password).

    Raises:
        ConfigError: ``store`` cannot list its keys.
    """

    def __init__(self, store: ChatStorage, name: str) -> None:
        listing = find_ability(store, ListableStorage)
        if listing is None:
            raise ConfigError(
                "mirror: the journal of what the secondary missed needs a store that can list "
                "its keys; give journal=<store URL>"
            )
        self.store = store
        self.name = name
        self._listing = listing
        self._sequenced = find_ability(store, SequencedStorage)
        self._replaceable = find_ability(store, ReplaceableStorage)

    def _key(self, mark: Mark) -> ChatKey:
        return ChatKey(JOURNAL_USER, self.name, mark.encode())

    async def marks(self) -> list[Mark]:
        """Every mark outstanding, in key order."""
        keys = await self._listing.list_keys(JOURNAL_USER, self.name)
        found = (Mark.decode(key.agent_id) for key in keys)
        return [mark for mark in found if mark is not None]

    async def add(self, mark: Mark) -> None:
        """Record one more miss of ``mark`` (every call changes the mark's version)."""
        await self.store.save(self._key(mark), ChatMessage("user", _TEXT))

    async def version(self, mark: Mark) -> str:
        """The mark's version now (read before a repair, given to :meth:`clear`)."""
        if self._sequenced is None:
            return ""
        return (await self._sequenced.head(self._key(mark))).version

    async def clear(self, mark: Mark, version: str) -> bool:
        """Forget ``mark`` if nothing was recorded since ``version``; ``False`` when a miss
        was recorded meanwhile (the mark stays)."""
        key = self._key(mark)
        if self._replaceable is None or self._sequenced is None:
            await self.store.delete(key)  # no compare-and-replace: a concurrent miss may go
            return True
        try:
            await self._replaceable.replace(key, [], expected_version=version)
        except ConflictError:
            return False
        return True
