"""``SQLiteChatStorage``: the embedded default store (stdlib ``sqlite3``, WAL mode).

Calls run on the event-loop thread, so every hook is a plain function. A local indexed
SQLite read takes microseconds, far less than one thread hop (about 95 µs on the reference
machine), so hopping threads would make every small read several times slower; the price is
that a write blocked on another process's lock blocks the loop for up to ``busy_timeout``.

Reads go through a :class:`~storage.codec.DecodeCache` (:mod:`.reads`). Derived data
(per-key and per-session tallies, checkpoints, the search index) never hides the messages:
a tally found missing or unreadable is rebuilt from them, an unreadable checkpoint is
ignored (and replaced by the next compaction), a damaged search index is dropped and
rebuilt; each is logged once and counted in ``corrupt_derived``.

Erasure: connections run with ``PRAGMA secure_delete = ON`` (deleted rows and freed pages are
zeroed), and ``delete``, ``delete_user`` and ``purge`` end by merging the search index and
truncating the write-ahead log, so the erased text is in none of the files afterwards.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Final, Literal, Self

from storage.abilities import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionPage,
    SummaryCheckpoint,
    Tail,
    Timeline,
)
from storage.codec import DecodeCache
from storage.durations import (
    Duration,
    PositiveDuration,
    parse_duration,
    parse_positive_duration,
    short_duration,
)
from storage.errors import ConfigError, InvalidArgumentError
from storage.message import ChatKey, ChatMessage
from storage.stores.base import BaseStore, SessionRow, conflict
from storage.stores.options import (
    Count,
    Seconds,
    check_count,
    check_seconds,
    checked,
    option_hint,
)
from storage.stores.sqlite import (
    checkpoints,
    reads,
    records,
    retention,
    rewrite,
    search,
    sessions,
    tallies,
    timetravel,
)
from storage.stores.sqlite.connection import connect
from storage.stores.sqlite.writes import append, to_us, transaction, wipe_wal
from storage.stores.times import Clock
from storage.stores.urls import path_from_url

__all__ = ["SQLiteChatStorage", "Synchronous"]

Synchronous = Literal["off", "normal", "full", "extra"]
_DEFAULT_CACHE_CHARS: Final = 32 * 1024 * 1024
# The constructor's keyword options (what ``from_url`` accepts).
_OPTIONS: Final = frozenset(
    {"synchronous", "busy_timeout", "cache_chars", "create", "retention", "purge_interval", "clock"}
)


class SQLiteChatStorage(BaseStore):
    """Message records in one table ordered by an autoincrement sequence, with the tables
    every ability needs beside it (see :mod:`storage.stores.sqlite.schema`).

    Implements every ability of :mod:`storage.abilities` with the semantics of the memory
    store (the reference): heads and tails, checkpoints (compare-and-set, every version
    kept) and leases, fork, rewind and as-of reads,
    replace (compare-and-replace) and conditional saves, session listing from an index
    (one range read of ``sessions_by_activity``, whatever the sessions hold), FTS5 search
    (BM25, only the user's index entries read), records, and retention. Several store
    instances and processes may share one file.

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
        retention: messages older than this (seconds, or a duration such as ``"30d"``) are
            deleted by :meth:`purge`, and by writes at most once per ``purge_interval``;
            ``None`` (default): kept forever.
        purge_interval: seconds (or a duration) between automatic purges; default one hour.
        clock: the time in seconds since the Unix epoch (default ``time.time``): lease
            expiry, the retention cut-off and the purge interval read it (tests inject one).
            Leases are shared by processes, so their clocks must agree.

    Raises:
        InvalidArgumentError: a bad ``synchronous``, ``busy_timeout``, ``cache_chars``,
            ``retention`` or ``purge_interval``.
        StorageUnavailableError: on first use, the file cannot be opened, is not a SQLite
            database, or does not exist and ``create`` is false; on any call after ``aclose``.
        SchemaVersionError: on first use, the database was written by a newer chatlayers.
    """

    scheme = "sqlite"
    url_driver_options = False  # every query option is its own: a stray one is a mistake
    driver_errors = (sqlite3.Error, OSError)

    def __init__(
        self,
        path: str | os.PathLike[str] = "chatlayers.db",
        *,
        synchronous: Synchronous = "normal",
        busy_timeout: Seconds = 5.0,
        cache_chars: Count = _DEFAULT_CACHE_CHARS,
        create: bool = True,
        retention: PositiveDuration | None = None,
        purge_interval: Duration = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous not in ("off", "normal", "full", "extra"):
            raise InvalidArgumentError(
                f"synchronous must be off, normal, full or extra, not {synchronous!r}"
            )
        self.path = os.fspath(path)
        self.synchronous = synchronous
        self.busy_timeout = float(checked("busy_timeout", busy_timeout, check_seconds))
        self.create = create
        self.retention = parse_positive_duration(retention) if retention is not None else None
        self.purge_interval = parse_duration(purge_interval)
        self._clock: Clock = clock
        self._cache = DecodeCache(checked("cache_chars", cache_chars, check_count))
        self._db: sqlite3.Connection | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``sqlite://:memory:``;
        query options are the constructor's (``?synchronous=full&retention=30d``).

        Raises:
            ConfigError: not a sqlite URL, no path, ``sqlite://x.db`` (two slashes name a
                host: the message shows ``sqlite:///x.db``), or an unknown query option.
        """
        path = path_from_url(url, "sqlite", options=options)
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            hint = option_hint(unknown[0], _OPTIONS, n=1)
            raise ConfigError(
                f"store 'sqlite' has no option {unknown[0]!r}{hint}; "
                f"allowed: {', '.join(sorted(_OPTIONS))}"
            )
        store = cls(path, **options)
        store.display_url = url.partition("?")[0]
        return store

    # --- connection ----------------------------------------------------------------------

    @property
    def _conn(self) -> sqlite3.Connection:
        # Opened on first use: building a stack (``chatlayers stack``) touches no file.
        db = self._db
        return db if db is not None else self._open()

    def _open(self) -> sqlite3.Connection:
        if self._closed:
            raise self._closed_error()
        self._db = connect(
            self.path,
            create=self.create,
            busy_timeout=self.busy_timeout,
            synchronous=self.synchronous,
            where=self.describe(),
        )
        return self._db

    def _location(self) -> str:
        return "sqlite://:memory:" if self.path == ":memory:" else f"sqlite:///{self.path}"

    def _describe_options(self) -> str:
        options = f"synchronous={self.synchronous}"
        if self.retention is not None:
            options += f", retention={short_duration(self.retention)}"
        return options

    async def _close(self) -> None:
        self._cache.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    def _erased(self, seqs: list[int]) -> None:
        """After messages were erased: forget them, and truncate the WAL holding them."""
        self._cache.discard(seqs)
        if self.path != ":memory:":
            wipe_wal(self._conn, self.describe(), self.busy_timeout)

    # --- ChatStorage hooks ---------------------------------------------------------------

    def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        with transaction(self._conn) as conn:
            return append(conn, key, batch, self._derived_unusable)[0]

    def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        return reads.fetch(self._conn, self._cache, key, limit)

    def _session_rows(self, user_id: str, session_id: str) -> list[SessionRow]:
        return reads.session_rows(self._conn, self._cache, user_id, session_id)

    def _delete(self, key: ChatKey) -> None:
        self._erased(rewrite.delete_key(self._conn, key, self._derived_unusable))

    def _delete_user(self, user_id: str) -> None:
        self._erased(rewrite.delete_user(self._conn, user_id, self._derived_unusable))

    def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        return tallies.keys(self._conn, user_id, session_id)

    # --- abilities -----------------------------------------------------------------------

    def _head(self, key: ChatKey) -> Head:
        """The newest sequence number (an indexed max read) with the epoch and checkpoint
        version (a primary-key read) in one statement; a tally found missing or unreadable
        is rebuilt from the messages first (a new epoch)."""
        conn = self._conn
        found = checkpoints.head(conn, key)
        if found is not None:
            return found
        with transaction(conn):
            return checkpoints.head_for_write(conn, key, self._derived_unusable)

    def _fetch_since(self, key: ChatKey, after: int) -> Tail:
        tail = reads.since(self._conn, self._cache, key, after)
        if tail is None:  # the tally is missing or unreadable: rebuild it, then read again
            self._head(key)
            tail = reads.since(self._conn, self._cache, key, after)
            assert tail is not None
        return tail

    def _load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        return checkpoints.load(self._conn, key, self._derived_unusable)

    def _checkpoint_version(self, key: ChatKey, version: int) -> SummaryCheckpoint | None:
        return checkpoints.load_version(self._conn, key, version, self._derived_unusable)

    def _save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Compare-and-set under the database's write lock (one transaction)."""
        with transaction(self._conn) as conn:
            return checkpoints.save(conn, key, checkpoint, expected_version, self._derived_unusable)

    def _acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        """A lease row shared by every process using the file (on the store's clock)."""
        with transaction(self._conn) as conn:
            return checkpoints.acquire(conn, key, owner, ttl, self._clock())

    def _release_lease(self, key: ChatKey, owner: str) -> None:
        checkpoints.release(self._conn, key, owner)

    def _replace(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str | None
    ) -> list[ChatMessage]:
        """One transaction: the version check, the new epoch, the checkpoint dropped."""
        conn = self._conn
        seqs, stored = rewrite.replace(conn, key, batch, expected_version, self._derived_unusable)
        self._cache.discard(seqs)
        return stored

    def _save_messages_if(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str
    ) -> list[ChatMessage]:
        """The version checked and the batch written in one transaction."""
        with transaction(self._conn) as conn:
            version = checkpoints.head_for_write(conn, key, self._derived_unusable).version
            if version != expected_version:
                raise conflict(key, expected_version, version)
            return append(conn, key, batch, self._derived_unusable)[0] if batch else []

    def _list_sessions(
        self, user_id: str, limit: int, after: tuple[int, str] | None, bound: int | None
    ) -> SessionPage:
        """The session rows are checked against the per-key rows first (the user's rows of
        both: counts, totals, types); rows that disagree are rebuilt from the messages."""
        conn = self._conn
        for attempt in range(2):
            conn.execute("BEGIN")  # the check, the sessions and their agents: one snapshot
            try:
                if attempt or tallies.sessions_consistent(conn, user_id):
                    return sessions.page(conn, user_id, limit, after, bound)
            finally:
                conn.execute("COMMIT")
            self._derived_unusable("session tally", f"user {user_id!r}", "disagrees with keys")
            with transaction(conn):
                tallies.rebuild_user(conn, user_id)
        raise AssertionError("unreachable")  # pragma: no cover

    def _search(self, user_id: str, query: str, terms: list[str], limit: int) -> list[SearchHit]:
        return search.search(self._conn, self._cache, user_id, terms, limit, self._derived_unusable)

    def _save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        with transaction(self._conn) as conn:
            return records.save(conn, key, record)

    def _fetch_records(self, key: ChatKey, kind: str | None) -> list[ConversationRecord]:
        return records.fetch(self._conn, key, kind)

    def _timeline(self, key: ChatKey) -> Timeline:
        found = reads.timeline(self._conn, self._cache, key)
        if found is None:  # the tally is missing or unreadable: rebuild it, then read again
            self._head(key)
            found = reads.timeline(self._conn, self._cache, key)
            assert found is not None
        return found

    def _rewind(self, key: ChatKey, to: str, rewind_id: str, now: datetime) -> int:
        """One transaction (:mod:`storage.stores.sqlite.timetravel`)."""
        with transaction(self._conn) as conn:
            return timetravel.rewind(conn, key, to, rewind_id, to_us(now), self._derived_unusable)

    def _purge(self, cutoff: datetime) -> int:
        """Each key touched starts a new epoch; the erased text is gone from the files
        afterwards, as after ``delete``."""
        conn = self._conn

        def work() -> list[int]:
            with transaction(conn):
                return retention.purge(conn, to_us(cutoff), self._cache.decode_rows)

        seqs = rewrite.index_repaired(conn, work, self._derived_unusable)
        if seqs:
            self._erased(seqs)
        return len(seqs)
