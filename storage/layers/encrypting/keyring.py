"""The keyring: each user's data key, wrapped by a master key, kept apart from the data.

Crypto-shredding rests on this store being separate: ``delete_user`` destroys the user's
entry here, and every copy of the user's ciphertext (WAL files, free pages, replicas, backups,
exports) becomes unreadable, because the data key existed nowhere else. Two kinds:

- :class:`SQLiteKeyring` (a path, or ``sqlite:///path``): one small table in its own file,
  ``secure_delete`` on, the write-ahead log truncated after every change, so a destroyed or
  re-wrapped entry leaves no old copy in the file. The default, for one host.
- :class:`StoreKeyring` (any other store URL: ``redis://...``, ``postgresql://...``, even
  ``memory://``): one entry per user in a chatlayers store of its own, for fleets sharing a
  server. Rotation appends the re-wrapped entry with a compare-and-set (so a rotation can
  never undo an erasure); older wrapped copies stay in that store until the user is erased.

Do not back the keyring up together with the data (a backup of both defeats shredding):
keep keyring backups separate and short-lived.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Final, Protocol

import attrs

from storage.errors import ConflictError, CorruptRecordError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage, check_key_part

__all__ = ["Keyring", "SQLiteKeyring", "StoreKeyring", "WrappedKey", "open_keyring"]


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


class Keyring(Protocol):
    """Where wrapped data keys live (one per user)."""

    location: str

    async def get(self, user_id: str) -> WrappedKey | None:
        """The user's entry, or ``None`` (never had one, or it was destroyed)."""
        ...

    async def add(self, entry: WrappedKey) -> WrappedKey:
        """Store ``entry`` unless the user has one already; return the one stored (the
        first writer wins, so concurrent processes agree on one data key)."""
        ...

    async def rewrap(self, entry: WrappedKey, *, expected: WrappedKey) -> bool:
        """Replace the user's entry by ``entry`` (same ``key_id``) only if it is still
        ``expected``; ``False`` when it changed or was destroyed meanwhile."""
        ...

    async def destroy(self, user_id: str) -> None:
        """Erase the user's entry (a no-op when there is none)."""
        ...

    async def entries(self) -> list[WrappedKey]:
        """Every entry, sorted by user id."""
        ...

    async def aclose(self) -> None: ...


_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS data_keys ("
    " user_id TEXT PRIMARY KEY, key_id TEXT NOT NULL, master TEXT NOT NULL,"
    " wrapped BLOB NOT NULL, created_at REAL NOT NULL)"
)


class SQLiteKeyring:
    """Wrapped data keys in a SQLite file of their own (mode 0600, ``secure_delete``).

    Calls run on the event-loop thread: a keyring lookup is one primary-key read of a tiny
    table (microseconds), cheaper than a thread hop. Several processes may share the file.

    Args:
        path: the keyring file (created on first use with mode 0600, parents 0700).
        busy_timeout: seconds to wait for another process's write lock.
        location: how the configuration named it, for messages (default: ``path`` as
            given).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        location: str | None = None,
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.location = location if location is not None else os.fspath(path)
        self._busy = busy_timeout
        self._db: sqlite3.Connection | None = None
        self._closed = False

    def _conn(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if self._closed:
            raise StorageUnavailableError(f"keyring {self.location}: closed")
        try:
            if not os.path.exists(self.path):
                Path(self.path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout = {int(self._busy * 1000)}")
            _use_wal(db, self._busy)
            db.execute("PRAGMA synchronous = FULL")  # a lost data key loses its user's data
            db.execute("PRAGMA secure_delete = ON")  # destroyed entries are zeroed on disk
            db.execute(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise StorageUnavailableError(f"keyring {self.location}: cannot open ({exc})") from exc
        self._db = db
        return db

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, params)
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"keyring {self.location}: {exc}") from exc

    def _wipe_wal(self) -> None:
        # Old versions of a changed page stay in -wal until a checkpoint: copy them back
        # (where secure_delete has zeroed the old cells) and truncate the log.
        self._run("PRAGMA wal_checkpoint(TRUNCATE)")

    async def get(self, user_id: str) -> WrappedKey | None:
        row = self._run(
            "SELECT key_id, master, wrapped FROM data_keys WHERE user_id = ?", (user_id,)
        ).fetchone()
        return None if row is None else WrappedKey(user_id, row[0], row[1], bytes(row[2]))

    async def add(self, entry: WrappedKey) -> WrappedKey:
        self._run(
            "INSERT OR IGNORE INTO data_keys VALUES (?, ?, ?, ?, ?)",
            (entry.user_id, entry.key_id, entry.master, entry.wrapped, time.time()),
        )
        stored = await self.get(entry.user_id)
        if stored is None:  # destroyed between the two statements by another process
            raise ConflictError(f"keyring: the data key of {entry.user_id!r} was just erased")
        return stored

    async def rewrap(self, entry: WrappedKey, *, expected: WrappedKey) -> bool:
        cursor = self._run(
            "UPDATE data_keys SET master = ?, wrapped = ? "
            "WHERE user_id = ? AND key_id = ? AND master = ? AND wrapped = ?",
            (
                entry.master,
                entry.wrapped,
                expected.user_id,
                expected.key_id,
                expected.master,
                expected.wrapped,
            ),
        )
        if cursor.rowcount:
            self._wipe_wal()
        return cursor.rowcount == 1

    async def destroy(self, user_id: str) -> None:
        cursor = self._run("DELETE FROM data_keys WHERE user_id = ?", (user_id,))
        if cursor.rowcount:
            self._wipe_wal()

    async def entries(self) -> list[WrappedKey]:
        rows = self._run(
            "SELECT user_id, key_id, master, wrapped FROM data_keys ORDER BY user_id"
        ).fetchall()
        return [WrappedKey(u, k, m, bytes(w)) for u, k, m, w in rows]

    async def aclose(self) -> None:
        self._closed = True
        if self._db is not None:
            self._db.close()
            self._db = None


def _use_wal(db: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch a new keyring file to WAL. Two processes creating the file at once may see
    ``database is locked`` here without SQLite's busy handler being called: retry briefly
    (once per file's life, when it is created)."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            (mode,) = db.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


# A store keyring keeps each user's entry as the messages of one conversation of that user.
_SESSION: Final = "chatlayers-keyring"
_AGENT: Final = "data-key"


class StoreKeyring:
    """Wrapped data keys in a chatlayers store of their own (``redis://``,
    ``postgresql://``, ``memory://``, ...): one conversation per user, one message per
    wrapping, the newest one current.

    The store must offer heads and conditional saves (every built-in store does): adding and
    re-wrapping are compare-and-set on the conversation's version, so two processes agree on
    one data key and a rotation can never bring back an erased one.

    Args:
        store: the keyring's store (closed with the keyring).
        location: its URL, redacted (for messages).
    """

    def __init__(self, store: Any, location: str) -> None:
        self.store = store
        self.location = location

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

    async def get(self, user_id: str) -> WrappedKey | None:
        check_key_part("user_id", user_id)
        messages = await self.store.fetch(self._key(user_id), limit=1)
        return self._decode(user_id, messages[-1]) if messages else None

    async def add(self, entry: WrappedKey) -> WrappedKey:
        version, current = await self._current(entry.user_id)
        if current is not None:
            return current
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

    async def destroy(self, user_id: str) -> None:
        await self.store.delete(self._key(user_id))

    async def entries(self) -> list[WrappedKey]:
        keys = await self.store.list_keys()
        out = []
        for key in keys:
            if key.session_id == _SESSION and key.agent_id == _AGENT:
                entry = await self.get(key.user_id)
                if entry is not None:
                    out.append(entry)
        return out

    async def aclose(self) -> None:
        await self.store.aclose()


def open_keyring(location: str) -> Keyring:
    """The keyring at ``location``: a file path or ``sqlite:///path`` (a
    :class:`SQLiteKeyring`), or any other store URL (a :class:`StoreKeyring`).

    Raises:
        ConfigError: an empty location, or a store URL that cannot be built.
    """
    from storage.errors import ConfigError
    from storage.redact import redact_url

    if not isinstance(location, str) or not location.strip():
        raise ConfigError("encrypt: keyring must name a file or a store URL")
    if "://" not in location:
        return SQLiteKeyring(os.path.expanduser(location), location=location)
    if location.startswith("sqlite://"):
        from storage.stores.urls import path_from_url

        path = path_from_url(location, "sqlite", options={})
        if path == ":memory:":
            raise ConfigError(
                "encrypt: a keyring in sqlite://:memory: would lose every data key on exit"
            )
        return SQLiteKeyring(path, location=redact_url(location))
    from storage.config import open_storage

    stack = open_storage(location)
    return StoreKeyring(stack.inner, redact_url(location))
