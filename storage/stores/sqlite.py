"""``sqlite:///PATH``: the embedded default store (stdlib ``sqlite3``, WAL mode).

Calls run on the event-loop thread. A local indexed SQLite read takes microseconds, far less
than one thread hop (about 95 µs on the reference machine), so hopping threads would make
every small read several times slower; the price is that a write blocked on another process's
lock blocks the loop for up to ``busy_timeout``.

Reads go through a :class:`~storage.codec.DecodeCache`: a record is never rewritten and a
sequence number never reused (``AUTOINCREMENT``), so a fetch first reads only the key's
sequence numbers (an index-only scan) and returns the messages it decoded before; when some
are new, one statement reads the records from the oldest new one on. Every fetch still asks
the database which messages exist, so writes and deletes by other processes are always seen.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, Literal

from storage.codec import DecodeCache, decode, encode
from storage.errors import StorageUnavailableError
from storage.history import drop_orphaned_results, prepare_batch
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import AsyncContextMixin

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

_KEY = "user_id = ? AND session_id = ? AND agent_id = ?"
# Sequence numbers only: answered from the (user, session, agent, seq) index alone.
_SEQS = f"SELECT seq FROM messages WHERE {_KEY} ORDER BY seq"
_SEQS_LAST = f"SELECT seq FROM messages WHERE {_KEY} ORDER BY seq DESC LIMIT ?"
# Records from sequence ? on (older rows come without theirs: SQLite then never reads their
# table row); one statement, so it sees one snapshot of the database.
_ROWS = f"SELECT seq, CASE WHEN seq >= ? THEN record END FROM messages WHERE {_KEY} ORDER BY seq"
_ROWS_LAST = (
    f"SELECT seq, CASE WHEN seq >= ? THEN record END FROM messages WHERE {_KEY} "
    "ORDER BY seq DESC LIMIT ?"
)
# Without a cache: the records alone.
_RECORDS = f"SELECT record FROM messages WHERE {_KEY} ORDER BY seq"
_RECORDS_LAST = f"SELECT record FROM messages WHERE {_KEY} ORDER BY seq DESC LIMIT ?"
_FETCH_SESSION = (
    "SELECT seq, agent_id, record FROM messages WHERE user_id = ? AND session_id = ? "
    "ORDER BY created_us, seq"
)
_DEFAULT_CACHE_CHARS: Final = 32 * 1024 * 1024
_INSERT = (
    "INSERT INTO messages (user_id, session_id, agent_id, message_id, created_us, record) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, session_id, agent_id, message_id) DO NOTHING"
)

Synchronous = Literal["off", "normal", "full", "extra"]


class SQLiteChatStorage(AsyncContextMixin):
    """One table of message records, ordered by an autoincrement sequence.

    Args:
        path: database file, or ``":memory:"``. Opened on first use (constructing a store
            touches no file); a new file is created with mode 0600 and missing parent
            directories with 0700, since chat history holds personal data.
        synchronous: SQLite's ``PRAGMA synchronous``. ``"normal"`` (default) with WAL survives
            a process crash (kill -9) but may lose the last commits on power loss; ``"full"``
            fsyncs the WAL on every commit (durable against power loss, slower appends).
        busy_timeout: seconds to wait for another process's write lock.
        cache_chars: budget of the decoded-message cache in characters of record text
            (default 32 Mi, roughly 30-60 MB of memory when full); 0 disables it, making
            every fetch decode every record.
        create: create the database when the file does not exist (default); with ``False``
            a missing file is an error (the CLI's read-only commands use this, so a mistyped
            path is not mistaken for an empty database).

    Raises:
        StorageUnavailableError: on first use, the file cannot be opened, is not a SQLite
            database, or does not exist and ``create`` is false; on any call after ``aclose``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "chatlayers.db",
        *,
        synchronous: Synchronous = "normal",
        busy_timeout: float = 5.0,
        cache_chars: int = _DEFAULT_CACHE_CHARS,
        create: bool = True,
    ) -> None:
        self.path = str(path)
        self._cache = DecodeCache(cache_chars)
        self.synchronous = synchronous
        if synchronous not in ("off", "normal", "full", "extra"):
            raise ValueError(f"synchronous must be off, normal, full or extra, not {synchronous!r}")
        self.busy_timeout = busy_timeout
        self.create = create
        self._db: sqlite3.Connection | None = None
        self._closed = False

    @property
    def _conn(self) -> sqlite3.Connection:
        # Opened on first use: building a stack (``chatlayers stack``) touches no file.
        db = self._db
        return db if db is not None else self._open()

    def _open(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageUnavailableError(f"SQLite database {self.path!r} is closed")
        on_disk = self.path != ":memory:" and not self.path.startswith("file:")
        try:
            if on_disk and not os.path.exists(self.path):
                if not self.create:
                    raise StorageUnavailableError(
                        f"no SQLite database at {self.path!r} (create=False)"
                    )
                Path(self.path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                # Chat history holds personal data: owner-only, like the JSONL store's files.
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, cached_statements=64
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            self._db = conn
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            self._db = None
            raise StorageUnavailableError(
                f"cannot open SQLite database {self.path!r}: {exc}"
            ) from exc
        return conn

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
        user, session, agent = key.user_id, key.session_id, key.agent_id
        rows = []
        last_at: datetime | None = None
        us = 0
        for m in batch:
            at = m.created_at
            if at is not last_at:  # a batch usually shares one timestamp
                us = (at - _EPOCH) // _MICRO  # type: ignore[operator]
                last_at = at
            rows.append((user, session, agent, m.id, us, encode(m)))
        conn = self._conn
        try:
            if len(rows) == 1:
                # One statement is its own transaction: no BEGIN/COMMIT round trips.
                return batch if conn.execute(_INSERT, rows[0]).rowcount else []
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.executemany(_INSERT, rows).rowcount == len(rows):
                    stored = batch
                else:
                    # Some ids were stored before (a retried batch): redo row by row to
                    # learn which; the write lock is held throughout.
                    conn.execute("ROLLBACK")
                    conn.execute("BEGIN IMMEDIATE")
                    execute = conn.execute
                    stored = [
                        m
                        for m, row in zip(batch, rows, strict=True)
                        if execute(_INSERT, row).rowcount
                    ]
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc
        return stored

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        params = (key.user_id, key.session_id, key.agent_id)
        cached = self._cache.messages
        cold = not self._cache.max_chars
        try:
            if limit is None:
                if cold:
                    records = self._conn.execute(_RECORDS, params).fetchall()
                    return [decode(r) for (r,) in records]
                seqs = self._conn.execute(_SEQS, params).fetchall()
                try:
                    return [cached[seq] for (seq,) in seqs]
                except KeyError as exc:
                    rows = self._conn.execute(_ROWS, (exc.args[0], *params)).fetchall()
                return self._decode(rows, _ROWS, params)
            if limit <= 0:
                if limit < 0:
                    raise ValueError(f"limit must be >= 0 or None, got {limit}")
                return []
            if cold:
                records = self._conn.execute(_RECORDS_LAST, (*params, limit)).fetchall()
                records.reverse()
                out = [decode(r) for (r,) in records]
            else:
                seqs = self._conn.execute(_SEQS_LAST, (*params, limit)).fetchall()
                seqs.reverse()
                out = self._window(seqs, params, limit)
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc
        return drop_orphaned_results(out)

    def _window(
        self, seqs: list[tuple[int]], params: tuple[str, str, str], limit: int
    ) -> list[ChatMessage]:
        cached = self._cache.messages
        try:
            return [cached[seq] for (seq,) in seqs]
        except KeyError as exc:
            rows = self._conn.execute(_ROWS_LAST, (exc.args[0], *params, limit)).fetchall()
        rows.reverse()
        return self._decode(rows, _ROWS_LAST, (*params, limit), reverse=True)

    def _decode(
        self,
        rows: list[tuple[int, str | None]],
        query: str,
        params: tuple[object, ...],
        *,
        reverse: bool = False,
    ) -> list[ChatMessage]:
        try:
            return self._cache.decode_rows(rows)
        except KeyError:
            # A row the first read found cached is not any more (cannot happen while the
            # cache is only touched on this thread); read every record instead.
            rows = self._conn.execute(query, (0, *params)).fetchall()
            if reverse:
                rows.reverse()
            return self._cache.decode_rows(rows)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        check_key_part("user_id", user_id)
        check_key_part("session_id", session_id)
        try:
            rows = self._conn.execute(_FETCH_SESSION, (user_id, session_id)).fetchall()
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc
        messages = self._cache.decode_rows((seq, record) for seq, _, record in rows)
        return [
            AgentMessage(agent_id, message)
            for (_, agent_id, _), message in zip(rows, messages, strict=True)
        ]

    async def delete(self, key: ChatKey) -> None:
        self._delete(f"WHERE {_KEY}", (key.user_id, key.session_id, key.agent_id))

    async def delete_user(self, user_id: str) -> None:
        check_key_part("user_id", user_id)
        self._delete("WHERE user_id = ?", (user_id,))

    def _delete(self, where: str, params: tuple[str, ...]) -> None:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Forget the decoded copies too: erased data must not linger in memory.
                seqs = conn.execute(f"SELECT seq FROM messages {where}", params).fetchall()
                conn.execute(f"DELETE FROM messages {where}", params)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc
        self._cache.discard(seq for (seq,) in seqs)

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """Every key holding a message, sorted; optionally one user's and/or one session's."""
        clauses: list[str] = []
        params: list[str] = []
        if user_id is not None:
            check_key_part("user_id", user_id)
            clauses.append("user_id = ?")
            params.append(user_id)
        if session_id is not None:
            check_key_part("session_id", session_id)
            clauses.append("session_id = ?")
            params.append(session_id)
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        try:
            rows = self._conn.execute(
                "SELECT DISTINCT user_id, session_id, agent_id FROM messages "
                f"{where}ORDER BY user_id, session_id, agent_id",
                params,
            ).fetchall()
        except sqlite3.Error as exc:
            raise self._unavailable(exc) from exc
        return [ChatKey(*row) for row in rows]

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._cache.clear()
            if self._db is not None:
                self._db.close()
                self._db = None

    def describe(self) -> str:
        return f"sqlite:///{self.path} (synchronous={self.synchronous})"
