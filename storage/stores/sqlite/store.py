"""``SQLiteChatStorage``: the embedded default store (stdlib ``sqlite3``, WAL mode).

Calls run on the event-loop thread. A local indexed SQLite read takes microseconds, far less
than one thread hop (about 95 µs on the reference machine), so hopping threads would make
every small read several times slower; the price is that a write blocked on another process's
lock blocks the loop for up to ``busy_timeout``.

Reads go through a :class:`~storage.codec.DecodeCache`: a record is never rewritten and a
sequence number never reused (``AUTOINCREMENT``), so a fetch first reads only the key's
sequence numbers (an index-only scan) and returns the messages it decoded before; when some
are new, one statement reads the records from the oldest new one on. Every fetch still asks
the database which messages exist, so writes and deletes by other processes are always seen.

Derived data (per-key and per-session tallies, checkpoints, the search index) never hides
the messages: a tally found missing or unreadable is rebuilt from them, an unreadable
checkpoint is ignored (and replaced by the next compaction), a damaged search index is
dropped and rebuilt; each is logged once and counted in ``corrupt_derived``.

Erasure: connections run with ``PRAGMA secure_delete = ON`` (deleted rows and freed pages are
zeroed), and ``delete``, ``delete_user`` and ``purge`` end by merging the search index and
truncating the write-ahead log, so the erased text is in none of the files afterwards.
"""

from __future__ import annotations

import difflib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, Self, TypeVar

from storage.abilities import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionPage,
    SummaryCheckpoint,
    Tail,
)
from storage.codec import DecodeCache, decode
from storage.durations import Duration, parse_duration
from storage.errors import ConfigError, ConflictError, InvalidArgumentError, StorageUnavailableError
from storage.history import drop_orphaned_results, prepare_batch, validate_history
from storage.message import ChatKey, ChatMessage, check_key_part
from storage.search import check_search_args, make_snippet, message_search_text
from storage.stores.base import BaseStore, SessionRow, check_key
from storage.stores.checks import (
    check_after,
    check_checkpoint,
    check_cursor,
    check_expected_version,
    check_lease,
    check_now,
    check_page_limit,
    check_record,
)
from storage.stores.sqlite import checkpoints, fts, records, retention, sessions, tallies
from storage.stores.sqlite.connection import connect
from storage.stores.sqlite.tallies import KEY
from storage.stores.sqlite.writes import append, remove, to_us, transaction, wipe_wal
from storage.stores.urls import path_from_url

__all__ = ["SQLiteChatStorage", "Synchronous"]

R = TypeVar("R")

Synchronous = Literal["off", "normal", "full", "extra"]
_DEFAULT_CACHE_CHARS: Final = 32 * 1024 * 1024
# The constructor's keyword options (what ``from_url`` accepts).
_OPTIONS: Final = frozenset(
    {"synchronous", "busy_timeout", "cache_chars", "create", "retention", "purge_interval", "clock"}
)

# Sequence numbers only: answered from the (user, session, agent, seq) index alone.
_SEQS = f"SELECT seq FROM messages WHERE {KEY} ORDER BY seq"
_SEQS_LAST = f"SELECT seq FROM messages WHERE {KEY} ORDER BY seq DESC LIMIT ?"
# Records from sequence ? on (older rows come without theirs: SQLite then never reads their
# table row); one statement, so it sees one snapshot of the database.
_ROWS = f"SELECT seq, CASE WHEN seq >= ? THEN record END FROM messages WHERE {KEY} ORDER BY seq"
_ROWS_LAST = (
    f"SELECT seq, CASE WHEN seq >= ? THEN record END FROM messages WHERE {KEY} "
    "ORDER BY seq DESC LIMIT ?"
)
# Without a cache: the records alone.
_RECORDS = f"SELECT record FROM messages WHERE {KEY} ORDER BY seq"
_RECORDS_LAST = f"SELECT record FROM messages WHERE {KEY} ORDER BY seq DESC LIMIT ?"
_SINCE = f"SELECT seq, record FROM messages WHERE {KEY} AND seq > ? ORDER BY seq"
_SESSION = "SELECT seq, agent_id, record FROM messages WHERE user_id = ? AND session_id = ?"


def _duration(seconds: float) -> str:
    """``2592000.0`` → ``"30d"``, as people write durations (``90.5`` → ``"90.5s"``)."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


class SQLiteChatStorage(BaseStore):
    """Message records in one table ordered by an autoincrement sequence, with the tables
    every ability needs beside it (see :mod:`storage.stores.sqlite.schema`).

    Implements every ability of :mod:`storage.abilities` with the semantics of the memory
    store (the reference): heads and tails, checkpoints (compare-and-set) and leases,
    replace and conditional saves, session listing from an index, FTS5 search, records, and
    retention. Several store instances and processes may share one file.

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
    driver_errors = (sqlite3.Error, OSError)

    def __init__(
        self,
        path: str | os.PathLike[str] = "chatlayers.db",
        *,
        synchronous: Synchronous = "normal",
        busy_timeout: float = 5.0,
        cache_chars: int = _DEFAULT_CACHE_CHARS,
        create: bool = True,
        retention: Duration | None = None,
        purge_interval: Duration = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous not in ("off", "normal", "full", "extra"):
            raise InvalidArgumentError(
                f"synchronous must be off, normal, full or extra, not {synchronous!r}"
            )
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise InvalidArgumentError(f"busy_timeout must be seconds, got {busy_timeout!r}")
        if not busy_timeout >= 0:
            raise InvalidArgumentError(f"busy_timeout must be >= 0, got {busy_timeout!r}")
        if type(cache_chars) is not int or cache_chars < 0:
            raise InvalidArgumentError(f"cache_chars must be an int >= 0, got {cache_chars!r}")
        self.path = os.fspath(path)
        self.synchronous = synchronous
        self.busy_timeout = float(busy_timeout)
        self.create = create
        self.retention = parse_duration(retention) if retention is not None else None
        self.purge_interval = parse_duration(purge_interval)
        self._clock = clock
        self._last_purge: float | None = None
        self._cache = DecodeCache(cache_chars)
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
            close = difflib.get_close_matches(unknown[0], sorted(_OPTIONS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
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
            raise StorageUnavailableError(f"{self.describe()}: the store is closed")
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
            options += f", retention={_duration(self.retention)}"
        return options

    async def _close(self) -> None:
        self._cache.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    def _erase(self, conn: sqlite3.Connection) -> None:
        if self.path != ":memory:":
            wipe_wal(conn, self.describe())

    # --- BaseStore hooks -----------------------------------------------------------------

    def _index_repaired(self, work: Callable[[], R]) -> R:
        """Run ``work`` (a write that removes messages, and so their index rows); when it
        fails on a damaged search index, drop the index (it is rebuilt from the messages) and
        run it again."""
        try:
            return work()
        except sqlite3.DatabaseError as exc:
            conn = self._conn
            if not fts.corruption(exc) or conn.in_transaction or not fts.broken(conn):
                raise
            self._derived_unusable("search index", self.describe(), exc)
            with transaction(conn):
                fts.reset(conn)
            return work()

    def _head(self, key: ChatKey) -> Head:
        """The key's head, its tally rebuilt first when it is missing or unreadable."""
        conn = self._conn
        found = checkpoints.head(conn, key)
        if found is not None:
            return found
        with transaction(conn):
            return checkpoints.head_for_write(conn, key, self._derived_unusable)

    async def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        with transaction(self._conn) as conn:
            stored, _ = append(conn, key, batch, self._derived_unusable)
        if self.retention is not None:
            self._maybe_purge()
        return stored

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        params = (key.user_id, key.session_id, key.agent_id)
        conn = self._conn
        if limit is None:
            if not self._cache.max_chars:
                return [decode(r) for (r,) in conn.execute(_RECORDS, params).fetchall()]
            cached = self._cache.messages
            seqs = conn.execute(_SEQS, params).fetchall()
            try:
                return [cached[seq] for (seq,) in seqs]
            except KeyError as exc:
                rows = conn.execute(_ROWS, (exc.args[0], *params)).fetchall()
            return self._decode(rows, _ROWS, params)
        if not self._cache.max_chars:
            records = conn.execute(_RECORDS_LAST, (*params, limit)).fetchall()
            records.reverse()
            return drop_orphaned_results([decode(r) for (r,) in records])
        seqs = conn.execute(_SEQS_LAST, (*params, limit)).fetchall()
        seqs.reverse()
        return drop_orphaned_results(self._window(seqs, params, limit))

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

    async def _session_rows(self, user_id: str, session_id: str) -> Iterable[SessionRow]:
        rows = self._conn.execute(_SESSION, (user_id, session_id)).fetchall()
        messages = self._cache.decode_rows((seq, record) for seq, _, record in rows)
        return [
            (m.created_at or datetime.min.replace(tzinfo=UTC), seq, agent_id, m)
            for (seq, agent_id, _), m in zip(rows, messages, strict=True)
        ]

    async def _delete(self, key: ChatKey) -> None:
        params = (key.user_id, key.session_id, key.agent_id)

        def delete() -> list[int]:
            with transaction(self._conn) as conn:
                seqs = remove(conn, KEY, params)
                for table in ("conversations", "checkpoints", "leases", "records"):
                    conn.execute(f"DELETE FROM {table} WHERE {KEY}", params)
                tallies.refresh_sessions(conn, [(key.user_id, key.session_id)])
            return seqs

        self._cache.discard(self._index_repaired(delete))
        self._erase(self._conn)

    async def _delete_user(self, user_id: str) -> None:
        def delete() -> list[int]:
            with transaction(self._conn) as conn:
                seqs = remove(conn, "user_id = ?", (user_id,))
                for table in ("conversations", "sessions", "checkpoints", "leases", "records"):
                    conn.execute(f"DELETE FROM {table} WHERE user_id = ?", (user_id,))
            return seqs

        self._cache.discard(self._index_repaired(delete))
        self._erase(self._conn)

    async def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        clauses: list[str] = []
        params: list[str] = []
        if user_id is not None:
            clauses.append("user_id = ?")
            params.append(user_id)
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._conn.execute(
            f"SELECT user_id, session_id, agent_id FROM conversations{where}", params
        ).fetchall()
        return [ChatKey(*row) for row in rows]

    # --- SequencedStorage ----------------------------------------------------------------

    async def head(self, key: ChatKey) -> Head:
        """The key's head in one statement: the newest sequence number (an indexed max read)
        with the epoch and checkpoint version (a primary-key read); ``Head(0, "", 0)`` when
        the key holds nothing. A tally row found missing or unreadable is rebuilt from the
        messages first (a new epoch).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the database cannot be read, or the store is closed.
        """
        check_key(key)
        return self._head(key)

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        """Raw messages with ``seq > after`` and the head, in one read transaction.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``after`` is not an int >= 0.
            StorageUnavailableError: the database cannot be read, or the store is closed.
        """
        check_key(key)
        check_after(after)
        conn = self._conn
        for _ in range(2):
            conn.execute("BEGIN")  # one snapshot for the head and the rows
            try:
                head = checkpoints.head(conn, key)
                rows = (
                    conn.execute(
                        _SINCE, (key.user_id, key.session_id, key.agent_id, after)
                    ).fetchall()
                    if head is not None and head.last_seq > after
                    else []
                )
            finally:
                conn.execute("COMMIT")
            if head is not None:
                break
            self._head(key)  # rebuild the tally, then read again
        assert head is not None
        messages = self._cache.decode_rows(rows)
        return Tail(head, tuple(seq for seq, _ in rows), tuple(messages))

    # --- CheckpointStorage ---------------------------------------------------------------

    async def load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        """The key's checkpoint, or ``None`` (none, or made under another epoch).

        A checkpoint that cannot be read (a column of the wrong type, a message that does
        not decode, a newer format version) is logged once, counted in
        ``corrupt_derived`` and ignored: ``None``, while :meth:`head` still reports its
        version, so the next compare-and-set replaces it.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the database cannot be read, or the store is closed.
        """
        check_key(key)
        return checkpoints.load(self._conn, key, self._derived_unusable)

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Compare-and-set the key's checkpoint under the database's write lock.

        Returns:
            The checkpoint stored as version ``expected_version + 1``, or ``None`` when the
            current version is not ``expected_version``, the epoch is not the key's current
            one, or ``covers_to`` is not the sequence number of a message the key holds.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: a bad ``expected_version`` or checkpoint field.
            InvalidMessageError: a checkpoint message is invalid or not marked as a summary.
            StorageUnavailableError: the database cannot be written, or the store is closed.
        """
        check_key(key)
        check_expected_version(expected_version)
        checked = check_checkpoint(checkpoint)
        with transaction(self._conn) as conn:
            return checkpoints.save(conn, key, checked, expected_version, self._derived_unusable)

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        """Take (or extend) the key's summarizing lease for ``ttl`` seconds of the clock;
        shared by every process using the file.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``owner`` empty or ``ttl`` not > 0.
            StorageUnavailableError: the database cannot be written, or the store is closed.
        """
        check_key(key)
        seconds = check_lease(owner, ttl)
        with transaction(self._conn) as conn:
            return checkpoints.acquire(conn, key, owner, seconds, self._clock())

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        """Give the lease back if ``owner`` holds it.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the database cannot be written, or the store is closed.
        """
        check_key(key)
        checkpoints.release(self._conn, key, owner)

    # --- ReplaceableStorage --------------------------------------------------------------

    async def replace(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Replace the key's messages with ``messages`` in one transaction: a new epoch, the
        checkpoint dropped, records kept. Returns the messages as stored.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
            StorageUnavailableError: the database cannot be written, or the store is closed.
        """
        check_key(key)
        batch = prepare_batch(validate_history(list(messages), system="anywhere"))
        params = (key.user_id, key.session_id, key.agent_id)

        def rewrite() -> tuple[list[int], list[ChatMessage]]:
            with transaction(self._conn) as conn:
                # Not an erasure: the search index is merged by later deletes, not here.
                seqs = remove(conn, KEY, params, erase=False)
                conn.execute(f"DELETE FROM conversations WHERE {KEY}", params)
                conn.execute(f"DELETE FROM checkpoints WHERE {KEY}", params)
                stored: list[ChatMessage] = []
                if batch:
                    stored, _ = append(conn, key, batch)
                tallies.refresh_sessions(conn, [(key.user_id, key.session_id)])
            return seqs, stored

        seqs, stored = self._index_repaired(rewrite)
        self._cache.discard(seqs)
        return stored

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """``save_messages`` only if ``head(key).version == expected_version``, checked and
        written in one transaction.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidMessageError: a message breaks a rule (nothing stored).
            ConflictError: the key's version is not ``expected_version`` (nothing stored).
            StorageUnavailableError: the database cannot be written, or the store is closed.
        """
        check_key(key)
        batch = prepare_batch(messages)
        with transaction(self._conn) as conn:
            version = checkpoints.head_for_write(conn, key, self._derived_unusable).version
            if version != expected_version:
                raise ConflictError(
                    f"{key}: version is {version!r}, not {expected_version!r}; nothing stored"
                )
            stored = append(conn, key, batch, self._derived_unusable)[0] if batch else []
        if self.retention is not None:
            self._maybe_purge()
        return stored

    # --- SessionListing ------------------------------------------------------------------

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """The user's sessions, newest ``last_at`` first, ties by ``session_id`` ascending:
        one range read of the ``sessions_by_activity`` index (cost independent of how many
        messages the sessions hold), plus one read of their agents. ``last_at`` is the
        session's last activity (deleting some of its messages does not lower it).

        The session rows are checked against the per-key rows first (the user's rows of
        both: counts, totals, types); rows that disagree are rebuilt from the messages.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: ``limit`` < 1 or a malformed ``cursor``.
            StorageUnavailableError: the database cannot be read, or the store is closed.
        """
        check_key_part("user_id", user_id)
        check_page_limit(limit)
        after = check_cursor(cursor)
        conn = self._conn
        for attempt in range(2):
            conn.execute("BEGIN")  # the check, the sessions and their agents: one snapshot
            try:
                if attempt or tallies.sessions_consistent(conn, user_id):
                    return sessions.page(conn, user_id, limit, after)
            finally:
                conn.execute("COMMIT")
            self._derived_unusable("session tally", f"user {user_id!r}", "disagrees with keys")
            with transaction(conn):
                tallies.rebuild_user(conn, user_id)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- SearchableStorage ---------------------------------------------------------------

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """The user's messages holding any word of ``query``, best first (FTS5 BM25; ties
        go to the newer message); only that user's index entries are read.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: a query without words, or ``limit`` < 1.
            StorageUnavailableError: the database cannot be read, or the store is closed.
        """
        check_key_part("user_id", user_id)
        terms = check_search_args(query, limit)
        conn = self._conn
        try:
            rows = self._search_rows(user_id, terms, limit)
        except sqlite3.DatabaseError as exc:
            if not fts.corruption(exc) or conn.in_transaction or not fts.broken(conn):
                raise
            self._derived_unusable("search index", self.describe(), exc)
            with transaction(conn):
                fts.reset(conn)
            rows = self._search_rows(user_id, terms, limit)
        wanted = set(terms)
        hits = []
        for (_, session_id, agent_id, _, score), message in zip(
            rows, self._cache.decode_rows((row[0], row[3]) for row in rows), strict=True
        ):
            snippet = make_snippet(message_search_text(message), wanted)
            hits.append(SearchHit(ChatKey(user_id, session_id, agent_id), message, snippet, -score))
        return hits

    def _search_rows(
        self, user_id: str, terms: list[str], limit: int
    ) -> list[tuple[int, str, str, str, float]]:
        conn = self._conn
        if not fts.mark_valid(conn):  # the mark cannot be right: index everything again
            self._derived_unusable("search index", self.describe(), "impossible index mark")
            with transaction(conn):
                fts.reset(conn)
        while fts.stale(conn):  # index what was saved since the last search
            with transaction(conn):
                fts.catch_up(conn)
        return fts.search(conn, user_id, terms, limit)

    # --- RecordStorage -------------------------------------------------------------------

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """Store ``record`` (a no-op returning the stored one when its id is stored already);
        its ``seq`` is taken from the messages' sequence, so it orders among them.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: empty ``kind`` or data that is not JSON-like.
            StorageUnavailableError: the database cannot be written, or the store is closed.
        """
        check_key(key)
        check_record(record)
        with transaction(self._conn) as conn:
            return records.save(conn, key, record, self._now())

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        """The key's records in store order, optionally of one ``kind``.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the database cannot be read, or the store is closed.
        """
        check_key(key)
        return records.fetch(self._conn, key, kind)

    # --- RetentionStorage ----------------------------------------------------------------

    async def purge(self, *, now: datetime | None = None) -> int:
        """Delete messages older than ``now - retention`` (``now`` default: the clock) with
        the checkpoints of their keys (each key touched starts a new epoch); records stay.
        The erased text is gone from the files afterwards, as after ``delete``. Tool groups
        go whole: when any message of an assistant's tool calls and their results is older
        than the cut-off, the whole group goes (never a result without its call).

        Returns:
            How many messages were deleted (0 without ``retention``).

        Raises:
            InvalidArgumentError: ``now`` is not a timezone-aware datetime.
            StorageUnavailableError: the database cannot be written, or the store is closed.
        """
        moment = check_now(now)
        if self.retention is None:
            return 0
        return self._purge(moment if moment is not None else self._now())

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _maybe_purge(self) -> None:
        """Purge at most once per ``purge_interval`` (called after writes)."""
        now = self._clock()
        if self._last_purge is not None and now - self._last_purge < self.purge_interval:
            return
        self._purge(datetime.fromtimestamp(now, UTC))

    def _purge(self, now: datetime) -> int:
        assert self.retention is not None
        self._last_purge = now.timestamp()
        cutoff = to_us(now - timedelta(seconds=self.retention))

        def purge() -> list[int]:
            with transaction(self._conn) as conn:
                return retention.purge(conn, cutoff, self._cache.decode_rows)

        seqs = self._index_repaired(purge)
        if not seqs:
            return 0
        self._cache.discard(seqs)
        self._erase(self._conn)
        return len(seqs)
