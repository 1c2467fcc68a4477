"""``JsonlChatStorage``: the protocol and every ability over the JSON-lines files, and where
each step runs.

Threads: a thread hop costs ~60-95 µs, more than a small append or tail read, so these run on
the event-loop thread: a tail read (``fetch(limit)``, ``head``, a short ``fetch_since``) is a
few ``pread`` calls; an append takes the flock without blocking and writes to the page cache.
Whatever could block goes to one worker-thread hop instead: the flock held by another task or
process, an fsync (``"always"``, or ``"batch"`` when due), a scan or a write over 128 KiB, a
whole-file read over 128 KiB, and every rewrite, checkpoint, lease, listing, search and purge.
Reads take no lock.

Driver errors (``OSError``) become ``StorageUnavailableError`` in ``BaseStore``, for the hooks
and every public coroutine alike.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Self

import anyio
import attrs

from storage.abilities import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionInfo,
    SessionPage,
    SummaryCheckpoint,
    Tail,
    encode_session_cursor,
)
from storage.durations import Duration, parse_duration
from storage.errors import ConflictError, InvalidArgumentError, StorageUnavailableError
from storage.history import prepare_batch, validate_history
from storage.message import ChatKey, ChatMessage, check_key_part
from storage.search import check_search_args, scan_search
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
from storage.stores.jsonl import leases
from storage.stores.jsonl.cache import LineCache
from storage.stores.jsonl.checkpoints import CheckpointReader, write_checkpoint
from storage.stores.jsonl.compact import CompactResult, compact_files
from storage.stores.jsonl.fsutil import (
    fsync_dir,
    fsync_paths,
    listdir,
    rmdir_if_empty,
    size,
    unlink,
)
from storage.stores.jsonl.lines import to_us
from storage.stores.jsonl.locks import SessionLocks, WouldBlock, flock
from storage.stores.jsonl.names import (
    Paths,
    encode_name,
    file_paths,
    key_paths,
    read_sidecar,
    session_paths,
    write_sidecar,
)
from storage.stores.jsonl.reads import (
    epoch_of,
    load_items,
    load_message_list,
    load_messages,
    load_records,
    read_back,
    read_since,
    session_rows,
    tail_messages,
)
from storage.stores.jsonl.rewrite import purge_file, remove_key, replace_file
from storage.stores.jsonl.sessions import from_us, store_summary, summarize_session
from storage.stores.jsonl.tree import (
    agent_of,
    all_keys,
    all_sessions,
    remove_session,
    session_files,
    session_of,
)
from storage.stores.jsonl.writer import FsyncPolicy, Writer
from storage.stores.urls import path_from_url

# Reads up to this size (or tail reads of up to INLINE_LIMIT messages) run on the event loop:
# below it a thread hop (~60-95 µs) would cost more than the read; above it the loop would
# block for milliseconds while a hop adds a few percent.
INLINE_BYTES: Final = 128 * 1024
INLINE_LIMIT: Final = 256
_EMPTY_HEAD: Final = Head(0, "", 0)


class JsonlChatStorage(BaseStore):
    """Conversations as append-only JSON-lines files under ``path`` (see
    ``storage.stores.jsonl``), with every ability of :mod:`storage.abilities`.

    Args:
        path: the root directory, created (0700) when missing.
        fsync: when appends reach the disk. ``"always"``: every save is fsynced (with its new
            directory entries) before it returns, durable against power loss. ``"batch"``
            (default): a file is fsynced by the first save at least ``fsync_interval``
            seconds after its last fsync, and on :meth:`aclose` and :meth:`compact`; like
            SQLite's ``synchronous=NORMAL``, a process crash (kill -9) loses nothing and a
            power loss may lose about the last interval. ``"never"``: left to the OS.
            Rewrites (``replace``, purges, compaction) and checkpoints are always fsynced.
        fsync_interval: seconds between fsyncs of one file under ``"batch"``.
        max_cached_keys: conversations whose ids this process keeps in memory for the
            duplicate check (least recently used evicted; an evicted key is rescanned once).
        cache_bytes: budget of the decoded-line cache in bytes of line text (default 32 MiB,
            roughly 30-60 MB of memory when full); 0 disables it, making every fetch decode
            every line it returns.
        retention: messages older than this (seconds, or a duration such as ``"30d"``,
            :func:`storage.durations.parse_duration`) are deleted by :meth:`purge`;
            ``None`` (default): kept forever.
        purge_interval: with ``retention``, saves run a purge of the whole store at most once
            per this many seconds (or a duration string) per store instance; default one hour.
        clock: the time in seconds since the Unix epoch (default ``time.time``): lease
            expiry, the retention cut-off and the purge interval all read it, so a test can
            inject a fake clock. Processes sharing a directory must share a clock.

    Raises:
        StorageUnavailableError: ``path`` cannot be created or is not a directory.
        InvalidArgumentError: ``fsync`` is not one of the three policies, ``cache_bytes`` < 0,
            or a bad ``retention`` or ``purge_interval``.
    """

    scheme = "jsonl"
    driver_errors = (OSError,)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "batch",
        fsync_interval: float = 1.0,
        max_cached_keys: int = 1024,
        cache_bytes: int = 32 * 1024 * 1024,
        retention: Duration | None = None,
        purge_interval: Duration = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if fsync not in ("always", "batch", "never"):
            raise InvalidArgumentError(f"fsync must be 'always', 'batch' or 'never', not {fsync!r}")
        if type(cache_bytes) is not int or cache_bytes < 0:
            raise InvalidArgumentError(f"cache_bytes must be an int >= 0, got {cache_bytes!r}")
        self.root = os.path.abspath(os.fspath(path))
        self.fsync: FsyncPolicy = fsync
        self.fsync_interval = fsync_interval
        self.max_cached_keys = max_cached_keys
        self.retention = parse_duration(retention) if retention is not None else None
        self.purge_interval = parse_duration(purge_interval)
        self._clock = clock
        self._last_purge: float | None = None
        try:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StorageUnavailableError(
                f"cannot create JSONL store directory {self.root!r}: {exc}"
            ) from exc
        if not os.path.isdir(self.root):
            raise StorageUnavailableError(f"JSONL store path {self.root!r} is not a directory")
        self._cache = LineCache(cache_bytes)
        self._writer = Writer(fsync, fsync_interval, max_cached_keys)
        self._locks = SessionLocks()
        self._checkpoints = CheckpointReader(self._derived_unusable)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``jsonl://relative/dir`` or ``jsonl:///absolute/dir``; query options are the
        constructor's (``jsonl:///var/chats?fsync=always``), given typed in ``options``.

        Raises:
            ConfigError: not a ``jsonl://`` URL, no path, or a query option the constructor
                does not take (the closest one suggested).
        """
        store = cls(path_from_url(url, "jsonl", options=options), **options)
        store.display_url = url.partition("?")[0]
        return store

    # --- internals -----------------------------------------------------------------------

    def _paths(self, key: ChatKey) -> Paths:
        return key_paths(self.root, key.user_id, key.session_id, key.agent_id)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailableError(f"{self.describe()}: the store is closed")

    def _location(self) -> str:
        return f"jsonl://{self.root}"  # the root is absolute: jsonl:///abs/dir

    def _describe_options(self) -> str:
        options = f"fsync={self.fsync}"
        if self.retention is not None:
            options += f", retention={self.retention:g}s"
        return options

    def _forget(self, prefix: str, *, lines: bool = False) -> None:
        """Drop cached state of every file under ``prefix`` (a file or a directory), and with
        ``lines`` their decoded lines and checkpoints too (erased data leaves memory)."""
        self._writer.forget(prefix)
        if lines:
            self._cache.drop(prefix)
            self._checkpoints.drop(prefix)

    def _forget_key(self, paths: Paths) -> None:
        self._writer.forget(paths.data)
        self._cache.drop(paths.data)
        self._checkpoints.drop(paths.ckpt)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _checkpoint_version(self, paths: Paths, epoch: str) -> int:
        checkpoint = self._checkpoints.read(paths.ckpt)
        return checkpoint.version if checkpoint is not None and checkpoint.epoch == epoch else 0

    def _head_sync(self, paths: Paths) -> Head:
        epoch, newest, _ = read_since(paths.data, paths.lock, 0, self._cache, limit=1)
        if not newest:
            return _EMPTY_HEAD
        return Head(newest, epoch, self._checkpoint_version(paths, epoch))

    def _ensure_sidecar(self, paths: Paths, key: ChatKey) -> None:
        """Write the full key beside a hashed name (the writer does it on append)."""
        expected = [key.user_id, key.session_id, key.agent_id]
        if paths.sidecar is not None and read_sidecar(paths.sidecar) != expected:
            write_sidecar(paths.sidecar, key)

    # --- BaseStore hooks -----------------------------------------------------------------

    async def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        self._check_open()
        stored = await self._append(key, batch, None)
        await self._maybe_purge()
        return stored

    async def _append(
        self,
        key: ChatKey,
        batch: list[ChatMessage],
        precondition: Callable[[int], None] | None,
    ) -> list[ChatMessage]:
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            if self.fsync != "always" and len(batch) <= INLINE_LIMIT:
                # Uncontended small appends are a few syscalls: cheaper than a thread hop.
                try:
                    return self._writer.append(paths, key, batch, INLINE_BYTES, precondition)
                except WouldBlock:
                    pass
            return await anyio.to_thread.run_sync(
                self._writer.append, paths, key, batch, None, precondition
            )

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        self._check_open()
        paths = self._paths(key)
        if limit is not None:
            if limit <= INLINE_LIMIT:
                return tail_messages(paths.data, paths.lock, limit, self._cache)
            file_size = size(paths.data)
            if file_size is None:
                return []
            if file_size <= INLINE_BYTES:
                return tail_messages(paths.data, paths.lock, limit, self._cache)
            return await anyio.to_thread.run_sync(
                tail_messages, paths.data, paths.lock, limit, self._cache
            )
        file_size = size(paths.data)
        if file_size is None:
            return []
        if file_size <= INLINE_BYTES:
            return load_message_list(paths.data, paths.lock, self._cache)
        return await anyio.to_thread.run_sync(
            load_message_list, paths.data, paths.lock, self._cache
        )

    async def _session_rows(self, user_id: str, session_id: str) -> Iterable[SessionRow]:
        self._check_open()
        session_dir = os.path.join(self.root, encode_name(user_id), encode_name(session_id))
        files = session_files(session_dir)
        if sum(file_size for _, _, file_size in files) <= INLINE_BYTES:
            return session_rows(session_dir, files, self._cache)
        return await anyio.to_thread.run_sync(session_rows, session_dir, files, self._cache)

    async def _delete(self, key: ChatKey) -> None:
        self._check_open()
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            await anyio.to_thread.run_sync(self._delete_sync, paths)

    def _delete_sync(self, paths: Paths) -> None:
        with flock(paths, make_dirs=False) as lock_fd:
            remove_key(paths, lock_fd)
            self._forget_key(paths)
        rmdir_if_empty(paths.user_dir)

    async def _delete_user(self, user_id: str) -> None:
        self._check_open()
        user_dir = os.path.join(self.root, encode_name(user_id))
        await anyio.to_thread.run_sync(self._delete_user_sync, user_dir)

    def _delete_user_sync(self, user_dir: str) -> None:
        for session in listdir(user_dir):
            session_dir = os.path.join(user_dir, session)
            if not os.path.isdir(session_dir):
                unlink(session_dir)
                continue
            with flock(session_paths(user_dir, session_dir), make_dirs=False) as lock_fd:
                remove_session(session_dir, held_lock=lock_fd is not None)
        self._forget(user_dir, lines=True)
        rmdir_if_empty(user_dir)

    async def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        self._check_open()
        return await anyio.to_thread.run_sync(self._list_keys_sync, user_id, session_id)

    def _list_keys_sync(self, user_id: str | None, session_id: str | None) -> list[ChatKey]:
        # A file may hold only records or its header (after a replace or a purge): keys are
        # listed only while they hold a message (one tail read each).
        return [
            key
            for key in all_keys(self.root, user_id, session_id)
            if read_since(self._paths(key).data, self._paths(key).lock, 0, self._cache, 1)[1]
        ]

    async def _close(self) -> None:
        try:
            dirty = self._writer.take_dirty()
            if dirty:
                await anyio.to_thread.run_sync(fsync_paths, dirty)
        finally:
            self._writer.clear()
            self._cache.clear()
            self._checkpoints.clear()

    # --- SequencedStorage ----------------------------------------------------------------

    async def head(self, key: ChatKey) -> Head:
        """The key's head: the newest message's ``seq`` read from the end of its file, the
        epoch from its first line, the checkpoint's version (one ``stat`` when unchanged);
        ``Head(0, "", 0)`` when it holds no message. Runs on the event loop (no hop).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the store is closed or the file cannot be read.
        """
        check_key(key)
        self._check_open()
        return self._head_sync(self._paths(key))

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        """Raw messages with ``seq > after`` and the head, in one snapshot (one descriptor),
        read backwards from the end of the file: the cost grows with the tail, not the file.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``after`` is not an int >= 0.
            StorageUnavailableError: the store is closed or the file cannot be read.
        """
        check_key(key)
        check_after(after)
        self._check_open()
        paths = self._paths(key)
        if after:
            # A short tail (the usual case: a cache catching up) is read on the loop; a reader
            # far behind reads the rest on a worker thread.
            epoch, newest, rows = read_since(
                paths.data, paths.lock, after, self._cache, INLINE_LIMIT + 1
            )
            if len(rows) > INLINE_LIMIT:
                epoch, newest, rows = await anyio.to_thread.run_sync(
                    read_since, paths.data, paths.lock, after, self._cache
                )
        else:
            file_size = size(paths.data)
            if file_size is None:
                return Tail(_EMPTY_HEAD, (), ())
            if file_size <= INLINE_BYTES:
                epoch, newest, rows = read_since(paths.data, paths.lock, 0, self._cache)
            else:
                epoch, newest, rows = await anyio.to_thread.run_sync(
                    read_since, paths.data, paths.lock, 0, self._cache
                )
        if not newest:
            return Tail(_EMPTY_HEAD, (), ())
        head = Head(newest, epoch, self._checkpoint_version(paths, epoch))
        return Tail(head, tuple(s for s, _ in rows), tuple(m for _, m in rows))

    # --- CheckpointStorage ---------------------------------------------------------------

    async def load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        """The key's checkpoint (its ``.ckpt`` sidecar), or ``None`` (none, or made under
        another epoch).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the store is closed or a file cannot be read.
        """
        check_key(key)
        self._check_open()
        paths = self._paths(key)
        checkpoint = self._checkpoints.read(paths.ckpt)
        if checkpoint is None:
            return None
        epoch, newest, _ = read_since(paths.data, paths.lock, 0, self._cache, limit=1)
        if not newest or checkpoint.epoch != epoch:
            return None
        return checkpoint

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Compare-and-set the key's checkpoint under the session's flock: written atomically
        (temporary file, fsync, rename) as version ``expected_version + 1``.

        Returns:
            The checkpoint as stored, or ``None`` when the current version is not
            ``expected_version``, the epoch is not the key's current one, or ``covers_to`` is
            not the sequence number of a message the key holds (nothing written).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: a bad ``expected_version`` or checkpoint field.
            InvalidMessageError: a checkpoint message is invalid or not marked as a summary.
            StorageUnavailableError: the store is closed or a file cannot be written.
        """
        check_key(key)
        check_expected_version(expected_version)
        checkpoint = check_checkpoint(checkpoint)
        self._check_open()
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            return await anyio.to_thread.run_sync(
                self._save_checkpoint_sync, paths, checkpoint, expected_version
            )

    def _save_checkpoint_sync(
        self, paths: Paths, checkpoint: SummaryCheckpoint, expected: int
    ) -> SummaryCheckpoint | None:
        with flock(paths, make_dirs=False) as lock_fd:
            if lock_fd is None:
                return None  # no session: the key holds nothing
            epoch, items = load_items(paths.data, paths.lock, self._cache)
            seqs = {seq for seq, item in items if type(item) is ChatMessage}
            if not seqs or checkpoint.epoch != epoch or checkpoint.covers_to not in seqs:
                return None
            if self._checkpoint_version(paths, epoch) != expected:
                return None
            stored = attrs.evolve(checkpoint, version=expected + 1)
            write_checkpoint(paths.ckpt, stored)
            if self.fsync == "always":  # the rename too must survive a power loss
                fsync_dir(paths.session_dir)
            return stored

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        """Take (or extend) the key's summarizing lease for ``ttl`` seconds of the clock: a
        ``.lease`` file changed under the session's flock, so processes exclude each other.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``owner`` empty or ``ttl`` not > 0.
            StorageUnavailableError: the store is closed or the file cannot be written.
        """
        check_key(key)
        seconds = check_lease(owner, ttl)
        self._check_open()
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            return await anyio.to_thread.run_sync(self._acquire_sync, paths, owner, seconds)

    def _acquire_sync(self, paths: Paths, owner: str, ttl: float) -> bool:
        with flock(paths):
            return leases.acquire(paths.lease, owner, ttl, self._clock())

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        """Give the lease back if ``owner`` holds it.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the store is closed or the file cannot be removed.
        """
        check_key(key)
        self._check_open()
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            await anyio.to_thread.run_sync(self._release_sync, paths, owner)

    def _release_sync(self, paths: Paths, owner: str) -> None:
        with flock(paths, make_dirs=False) as lock_fd:
            if lock_fd is not None:
                leases.release(paths.lease, owner)

    # --- ReplaceableStorage --------------------------------------------------------------

    async def replace(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Replace the key's messages with ``messages`` in a new epoch; the checkpoint goes.

        The file is rewritten whole under the session's flock (temporary file, fsync,
        rename, fsync of the directory): readers and a crash see the old record or the new
        one. Records stay (they are not messages). Returns the messages as stored.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
            StorageUnavailableError: the store is closed or the file cannot be written.
        """
        check_key(key)
        batch = prepare_batch(validate_history(list(messages), system="anywhere"))
        self._check_open()
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            await anyio.to_thread.run_sync(self._replace_sync, paths, key, batch)
        return list(batch)

    def _replace_sync(self, paths: Paths, key: ChatKey, batch: list[ChatMessage]) -> None:
        with flock(paths, sync_dirs=True) as lock_fd:
            assert lock_fd is not None
            try:
                if batch:
                    self._ensure_sidecar(paths, key)
                replace_file(paths, lock_fd, batch)
            finally:
                self._forget_key(paths)
        rmdir_if_empty(paths.user_dir)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """``save_messages`` only if ``head(key).version == expected_version``, checked under
        the session's flock in the same critical section as the append.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidMessageError: a message breaks a rule (nothing stored).
            ConflictError: the key's version is not ``expected_version`` (nothing stored).
            StorageUnavailableError: the store is closed or the file cannot be written.
        """
        check_key(key)
        batch = prepare_batch(messages)
        self._check_open()
        paths = self._paths(key)
        if not batch:
            version = self._head_sync(paths).version
            if version != expected_version:
                raise self._conflict(key, version, expected_version)
            return []

        def check(fd: int) -> None:
            _, newest = read_back(fd, paths.data, paths.lock, self._cache, 1, 0)
            version = (Head(newest, epoch_of(fd)) if newest else _EMPTY_HEAD).version
            if version != expected_version:
                raise self._conflict(key, version, expected_version)

        stored = await self._append(key, batch, check)
        await self._maybe_purge()
        return stored

    @staticmethod
    def _conflict(key: ChatKey, version: str, expected: str) -> ConflictError:
        return ConflictError(f"{key}: version is {version!r}, not {expected!r}; nothing stored")

    # --- SessionListing ------------------------------------------------------------------

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """The user's sessions, newest ``last_at`` first, ties by ``session_id`` ascending.
        ``last_at`` is the session's last activity: deleting or rewriting a conversation of
        it does not lower it (kept in the session's ``.summary``).

        Cost: a walk of the user's session directories (every page walks them all: O(the
        user's sessions)), a ``stat`` and a small read per conversation, and a scan of the
        bytes appended since the last listing (heads and times only, never decoded into
        messages), cached in each session's ``.summary`` (``storage.stores.jsonl.sessions``).
        Saves pay nothing for it.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: ``limit`` < 1 or a malformed ``cursor``.
            StorageUnavailableError: the store is closed or a file cannot be read.
        """
        check_key_part("user_id", user_id)
        check_page_limit(limit)
        after = check_cursor(cursor)
        self._check_open()
        infos = await anyio.to_thread.run_sync(self._sessions_sync, user_id)
        rows = sorted(
            ((to_us(i.last_at), i) for i in infos), key=lambda r: (-r[0], r[1].session_id)
        )
        if after is not None:
            rows = [r for r in rows if (-r[0], r[1].session_id) > (-after[0], after[1])]
        page = rows[:limit]
        next_cursor = None
        if len(rows) > limit:
            last = page[-1][1]
            next_cursor = encode_session_cursor(last.last_at, last.session_id)
        return SessionPage(tuple(info for _, info in page), next_cursor)

    def _sessions_sync(self, user_id: str) -> list[SessionInfo]:
        out = []
        user_dir = os.path.join(self.root, encode_name(user_id))
        for name in listdir(user_dir):
            session_dir = os.path.join(user_dir, name)
            summary, changed = summarize_session(session_dir)
            if changed:
                store_summary(session_paths(user_dir, session_dir), summary)
            agents, count, lo, hi = [], 0, 0, 0
            for file_name, entry in summary.files.items():
                if not entry.count:
                    continue
                agent = agent_of(session_dir, file_name)
                if agent is None:
                    continue
                agents.append(agent)
                lo = entry.min_us if not count else min(lo, entry.min_us)
                hi = entry.max_us if not count else max(hi, entry.max_us)
                count += entry.count
            session_id = session_of(session_dir, list(summary.files)) if count else None
            if session_id is not None:
                agents.sort()
                # The last activity: deleting a conversation of the session does not lower it.
                hi = max(hi, summary.active)
                out.append(SessionInfo(session_id, tuple(agents), count, from_us(lo), from_us(hi)))
        return out

    # --- SearchableStorage ---------------------------------------------------------------

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """The user's messages matching ``query``, best first
        (:func:`storage.search.scan_search`).

        Cost: a scan of every message of the user (each file of the user's directory read
        whole, decoded lines served from the line cache), in one worker-thread hop; other
        users' files are never opened.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: a query without words, or ``limit`` < 1.
            StorageUnavailableError: the store is closed or a file cannot be read.
        """
        check_key_part("user_id", user_id)
        check_search_args(query, limit)
        self._check_open()
        return await anyio.to_thread.run_sync(self._search_sync, user_id, query, limit)

    def _search_sync(self, user_id: str, query: str, limit: int) -> list[SearchHit]:
        items: list[tuple[ChatKey, ChatMessage]] = []
        for key in all_keys(self.root, user_id, None):
            if key.user_id != user_id:
                continue
            paths = self._paths(key)
            items.extend((key, m) for _, m in load_messages(paths.data, paths.lock, self._cache))
        return scan_search(query, items, limit=limit)

    # --- RecordStorage -------------------------------------------------------------------

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """Store ``record`` as a line of its own kind in the key's file (its ``seq`` from the
        session's counter, so comparable with message seqs); a no-op returning the stored one
        when its id is stored already.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: empty ``kind`` or data that is not JSON-like.
            StorageUnavailableError: the store is closed or the file cannot be written.
        """
        check_key(key)
        check_record(record)
        self._check_open()
        created = record.created_at.astimezone(UTC) if record.created_at else self._now()
        record = attrs.evolve(record, created_at=created)
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            stored = await anyio.to_thread.run_sync(self._writer.append_record, paths, key, record)
            if stored is not None:
                return stored
            found = await anyio.to_thread.run_sync(
                load_records, paths.data, paths.lock, self._cache
            )
        return next(r for r in found if r.id == record.id)

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        """The key's records in store order, optionally of one ``kind`` (a read of the whole
        file).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the store is closed or the file cannot be read.
        """
        check_key(key)
        self._check_open()
        paths = self._paths(key)
        file_size = size(paths.data)
        if file_size is None:
            return []
        if file_size <= INLINE_BYTES:
            found = load_records(paths.data, paths.lock, self._cache)
        else:
            found = await anyio.to_thread.run_sync(
                load_records, paths.data, paths.lock, self._cache
            )
        return [r for r in found if kind is None or r.kind == kind]

    # --- RetentionStorage ----------------------------------------------------------------

    async def purge(self, *, now: datetime | None = None) -> int:
        """Delete messages older than ``now - retention`` (``now`` default: the clock) and
        the checkpoints of their keys (each file touched is rewritten atomically with a new
        epoch; records stay).

        Cost: a walk of the whole store with each session's ``.summary`` (see
        :meth:`list_sessions`); only files holding a message older than the cut-off are read
        whole and rewritten.

        Returns:
            How many messages were deleted (0 without ``retention``).

        Raises:
            InvalidArgumentError: ``now`` is not a timezone-aware datetime.
            StorageUnavailableError: the store is closed or a file cannot be rewritten.
        """
        moment = check_now(now)
        self._check_open()
        if self.retention is None:
            return 0
        return await self._purge(moment if moment is not None else self._now())

    async def _maybe_purge(self) -> None:
        """Purge at most once per ``purge_interval`` (called on saves)."""
        if self.retention is None:
            return
        now = self._clock()
        if self._last_purge is not None and now - self._last_purge < self.purge_interval:
            return
        await self._purge(datetime.fromtimestamp(now, UTC))

    async def _purge(self, now: datetime) -> int:
        assert self.retention is not None
        self._last_purge = now.timestamp()
        cutoff_us = to_us(now - timedelta(seconds=self.retention))
        return await anyio.to_thread.run_sync(self._purge_sync, cutoff_us)

    def _purge_sync(self, cutoff_us: int) -> int:
        removed = 0
        for user_dir, session_dir, _ in all_sessions(self.root):
            summary, changed = summarize_session(session_dir)
            old = [n for n, e in summary.files.items() if e.count and e.min_us < cutoff_us]
            paths = session_paths(user_dir, session_dir)
            if not old:
                if changed:
                    store_summary(paths, summary)
                continue
            # flock alone excludes writers of this and other processes (its own descriptor).
            with flock(paths, make_dirs=False) as lock_fd:
                if lock_fd is None:
                    continue
                for name in old:
                    key_file = file_paths(user_dir, session_dir, name)
                    try:
                        removed += purge_file(key_file, lock_fd, cutoff_us)
                    finally:
                        self._forget_key(key_file)
            rmdir_if_empty(user_dir)
        return removed

    # --- maintenance ---------------------------------------------------------------------

    async def compact(self, key: ChatKey) -> CompactResult | None:
        """Rewrite one conversation's file without its torn, unreadable or incomplete lines.

        The valid lines (and the header: the epoch stays) are copied byte for byte (``seq``
        kept) to a temporary file in the same directory, fsynced, and renamed over the file,
        under the session's locks; readers see the old file or the new one. Nothing is
        rewritten when nothing needs dropping.

        Returns:
            What was done, or ``None`` when the conversation has no file.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the file cannot be read or replaced.
        """
        check_key(key)
        self._check_open()
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            try:
                done = await anyio.to_thread.run_sync(
                    compact_files, paths, [paths.data], self._writer.mark_synced
                )
            finally:
                self._forget(paths.data)
        return done[0] if done else None

    async def compact_all(self) -> list[CompactResult]:
        """:meth:`compact` every file under the root, one session at a time.

        Raises:
            StorageUnavailableError: a file cannot be read or replaced.
        """
        self._check_open()
        results: list[CompactResult] = []
        sessions = await anyio.to_thread.run_sync(all_sessions, self.root)
        for user_dir, session_dir, files in sessions:
            paths = session_paths(user_dir, session_dir)
            async with self._locks.hold(session_dir):
                try:
                    done = await anyio.to_thread.run_sync(
                        compact_files, paths, files, self._writer.mark_synced
                    )
                finally:
                    self._forget(session_dir)
            results.extend(done)
        return results
