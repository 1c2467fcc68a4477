"""``sqlite:///PATH``: the embedded default store (stdlib ``sqlite3``, WAL mode).

Calls run on the event-loop thread. A local indexed SQLite read takes microseconds, far less
than one thread hop (about 95 µs on the reference machine), so hopping threads would make
every small read several times slower; the price is that a write blocked on another process's
lock blocks the loop for up to ``busy_timeout``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, Literal

from storage.codec import decode, encode
from storage.errors import StorageUnavailableError
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import AsyncContextMixin
from storage.stores.base import prepare_batch

__all__ = ["SQLiteChatStorage"]

SCHEMA_VERSION: Final = 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO: Final = timedelta(microseconds=1)

# Forward migrations: MIGRATIONS[n] takes a database from user_version n to n + 1.
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE IF NOT EXISTS messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            agent_id TEXT NOT NULL,
            message_id TEXT NOT NULL,
            created_us INTEGER NOT NULL,
            record TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS messages_by_key ON messages "
        "(user_id, session_id, agent_id, seq)",
        "CREATE UNIQUE INDEX IF NOT EXISTS messages_by_id ON messages "
        "(user_id, session_id, agent_id, message_id)",
    ),
)

_FETCH = (
    "SELECT record FROM messages WHERE user_id = ? AND session_id = ? AND agent_id = ? "
    "ORDER BY seq"
)
_FETCH_LAST = (
    "SELECT record FROM messages WHERE user_id = ? AND session_id = ? AND agent_id = ? "
    "ORDER BY seq DESC LIMIT ?"
)
_FETCH_SESSION = (
    "SELECT agent_id, record FROM messages WHERE user_id = ? AND session_id = ? "
    "ORDER BY created_us, seq"
)
_INSERT = (
    "INSERT INTO messages (user_id, session_id, agent_id, message_id, created_us, record) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, session_id, agent_id, message_id) DO NOTHING"
)

Synchronous = Literal["off", "normal", "full", "extra"]


class SQLiteChatStorage(AsyncContextMixin):
    """One table of message records, ordered by an autoincrement sequence.

    Args:
        path: database file, or ``":memory:"``. Parent directories are created.
        synchronous: SQLite's ``PRAGMA synchronous``. ``"normal"`` (default) with WAL survives
            a process crash (kill -9) but may lose the last commits on power loss; ``"full"``
            fsyncs the WAL on every commit (durable against power loss, slower appends).
        busy_timeout: seconds to wait for another process's write lock.

    Raises:
        StorageUnavailableError: the file cannot be opened or is not a SQLite database.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "chatlayers.db",
        *,
        synchronous: Synchronous = "normal",
        busy_timeout: float = 5.0,
    ) -> None:
        self.path = str(path)
        self.synchronous = synchronous
        if synchronous not in ("off", "normal", "full", "extra"):
            raise ValueError(f"synchronous must be off, normal, full or extra, not {synchronous!r}")
        try:
            if self.path != ":memory:" and not self.path.startswith("file:"):
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, cached_statements=64
            )
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            self._conn = conn
            self._migrate()
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        self._closed = False

    def _migrate(self) -> None:
        conn = self._conn
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version >= len(MIGRATIONS):
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            for step in MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _unavailable(self, exc: sqlite3.Error) -> StorageUnavailableError:
        return StorageUnavailableError(f"SQLite database {self.path!r}: {exc}")

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        return await self.save_messages(key, [message])

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        batch = prepare_batch(messages)
        if not batch:
            return []
        rows = [
            (
                key.user_id,
                key.session_id,
                key.agent_id,
                m.id,
                (m.created_at - _EPOCH) // _MICRO,  # type: ignore[operator]
                encode(m),
            )
            for m in batch
        ]
        conn = self._conn
        stored: list[ChatMessage] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                execute = conn.execute
                for message, row in zip(batch, rows, strict=True):
                    if execute(_INSERT, row).rowcount:
                        stored.append(message)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc
        return stored

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        try:
            if limit is None:
                rows = self._conn.execute(
                    _FETCH, (key.user_id, key.session_id, key.agent_id)
                ).fetchall()
                return [decode(r) for (r,) in rows]
            if limit <= 0:
                if limit < 0:
                    raise ValueError(f"limit must be >= 0 or None, got {limit}")
                return []
            rows = self._conn.execute(
                _FETCH_LAST, (key.user_id, key.session_id, key.agent_id, limit)
            ).fetchall()
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc
        rows.reverse()
        out = [decode(r) for (r,) in rows]
        start = 0
        while start < len(out) and out[start].role == "tool":
            start += 1
        return out[start:] if start else out

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        check_key_part("user_id", user_id)
        check_key_part("session_id", session_id)
        try:
            rows = self._conn.execute(_FETCH_SESSION, (user_id, session_id)).fetchall()
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc
        return [AgentMessage(agent_id, decode(record)) for agent_id, record in rows]

    async def delete(self, key: ChatKey) -> None:
        try:
            self._conn.execute(
                "DELETE FROM messages WHERE user_id = ? AND session_id = ? AND agent_id = ?",
                (key.user_id, key.session_id, key.agent_id),
            )
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc

    async def delete_user(self, user_id: str) -> None:
        check_key_part("user_id", user_id)
        try:
            self._conn.execute("DELETE FROM messages WHERE user_id = ?", (user_id,))
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._conn.close()

    def describe(self) -> str:
        return f"sqlite:///{self.path} (synchronous={self.synchronous})"
