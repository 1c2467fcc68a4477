"""``JsonlChatStorage``: the hooks over the JSON-lines files, and where each step runs.

Threads: a thread hop costs ~60-95 µs, more than a small append or tail read, so these run on
the event-loop thread: a tail read (``fetch(limit)``, ``head``, a short ``fetch_since``) is a
few ``pread`` calls; an append takes the flock without blocking and writes to the page cache.
Whatever could block goes to one worker-thread hop instead: the flock held by another task or
process, an fsync (``"always"``, or ``"batch"`` when due), a scan or a write over 128 KiB, a
whole-file read over 128 KiB, and every rewrite, checkpoint, lease, listing, search and purge.
Reads take no lock. The work itself is in the per-ability modules (``reads``, ``writer``,
``rewrite``, ``checkpoints``, ``leases``, ``sessions``, ``compact``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Final, Self, TypeVar, TypeVarTuple, Unpack

import anyio
import attrs

from storage.abilities import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionPage,
    SummaryCheckpoint,
    Tail,
    Timeline,
)
from storage.durations import (
    Duration,
    PositiveDuration,
    parse_duration,
    parse_positive_duration,
    short_duration,
)
from storage.errors import InvalidArgumentError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.search import scan_search
from storage.stores.base import EMPTY_HEAD, BaseStore, SessionRow, conflict, page_of
from storage.stores.jsonl import checkpoints, leases, rewrite
from storage.stores.jsonl.cache import LineCache
from storage.stores.jsonl.checkpoints import CheckpointReader
from storage.stores.jsonl.fsutil import fsync_paths, size
from storage.stores.jsonl.locks import SessionLocks, WouldBlock
from storage.stores.jsonl.maintenance import Maintenance
from storage.stores.jsonl.names import Paths, encode_name, key_paths
from storage.stores.jsonl.reads import (
    epoch_of,
    keys_with_messages,
    load_message_list,
    load_records,
    read_back,
    read_since,
    session_rows,
    tail_messages,
    user_messages,
)
from storage.stores.jsonl.reads import timeline as read_timeline
from storage.stores.jsonl.sessions import user_sessions
from storage.stores.jsonl.timetravel import rewind_key
from storage.stores.jsonl.tree import session_files
from storage.stores.jsonl.writer import FsyncPolicy, Writer
from storage.stores.options import (
    Count,
    PositiveCount,
    Seconds,
    check_count,
    check_positive_count,
    check_seconds,
    checked,
)
from storage.stores.times import Clock, to_us
from storage.stores.urls import path_from_url

R = TypeVar("R")
Args = TypeVarTuple("Args")

# Reads up to this size (or tail reads of up to INLINE_LIMIT messages) run on the event loop:
# below it a thread hop (~60-95 µs) would cost more than the read; above it the loop would
# block for milliseconds while a hop adds a few percent.
INLINE_BYTES: Final = 128 * 1024
INLINE_LIMIT: Final = 256


class JsonlChatStorage(Maintenance, BaseStore):
    """Conversations as append-only JSON-lines files under ``path`` (see
    ``storage.stores.jsonl``), with every ability of :mod:`storage.abilities`.

    Costs beyond a key's own file: ``list_sessions`` walks the user's session directories
    (every page walks them all: O(the user's sessions)), with a ``stat`` and a small read per
    conversation and a scan of the bytes appended since the last listing, cached in each
    session's ``.summary``; ``search`` scans every message of the user (other users' files
    are never opened); ``purge`` walks the whole store with each session's ``.summary`` and
    rewrites only files holding a message older than the cut-off.

    Args:
        path: the root directory. Constructing a store touches nothing: the directory is
            created (0700, with any missing parent) by the first write, and until then every
            read finds an empty store.
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
        create: a missing directory is created by the first write (default); with ``False``
            it is an error here (the CLI's commands that only read or change stored
            conversations use this, so a mistyped path is not mistaken for an empty store).

    Raises:
        StorageUnavailableError: ``path`` is not a directory, or it does not exist and
            ``create`` is false; on a write, the directory cannot be created.
        InvalidArgumentError: ``fsync`` is not one of the three policies, a bad
            ``fsync_interval``, ``max_cached_keys``, ``cache_bytes``, ``retention`` or
            ``purge_interval``.
    """

    scheme = "jsonl"
    url_driver_options = False  # every query option is its own: a stray one is a mistake
    driver_errors = (OSError,)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "batch",
        fsync_interval: Seconds = 1.0,
        max_cached_keys: PositiveCount = 1024,
        cache_bytes: Count = 32 * 1024 * 1024,
        retention: PositiveDuration | None = None,
        purge_interval: Duration = 3600.0,
        clock: Callable[[], float] = time.time,
        create: bool = True,
    ) -> None:
        if fsync not in ("always", "batch", "never"):
            raise InvalidArgumentError(f"fsync must be 'always', 'batch' or 'never', not {fsync!r}")
        checked("fsync_interval", fsync_interval, check_seconds)
        checked("max_cached_keys", max_cached_keys, check_positive_count)
        checked("cache_bytes", cache_bytes, check_count)
        self.root = os.path.abspath(os.fspath(path))
        self.fsync: FsyncPolicy = fsync
        self.fsync_interval = fsync_interval
        self.max_cached_keys = max_cached_keys
        self.retention = parse_positive_duration(retention) if retention is not None else None
        self.purge_interval = parse_duration(purge_interval)
        self._clock: Clock = clock
        self.create = create
        # Nothing is created here (the root is made, 0700, by the first write): a stat only.
        if os.path.exists(self.root):
            if not os.path.isdir(self.root):
                raise StorageUnavailableError(f"JSONL store path {self.root!r} is not a directory")
        elif not create:
            raise StorageUnavailableError(
                f"no JSONL store at {self.root!r} (opened with create=False, so none is made: "
                "check the path)"
            )
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

    def _location(self) -> str:
        return f"jsonl://{self.root}"  # the root is absolute: jsonl:///abs/dir

    def _describe_options(self) -> str:
        options = f"fsync={self.fsync}"
        if self.retention is not None:
            options += f", retention={short_duration(self.retention)}"
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

    async def _locked(self, paths: Paths, work: Callable[[Unpack[Args]], R], *args: *Args) -> R:
        """``work(*args)`` on a worker thread, holding the session's in-process lock."""
        async with self._locks.hold(paths.session_dir):
            return await anyio.to_thread.run_sync(work, *args)

    async def _close(self) -> None:
        try:
            dirty = self._writer.take_dirty()
            if dirty:
                await anyio.to_thread.run_sync(fsync_paths, dirty)
        finally:
            self._writer.clear()
            self._cache.clear()
            self._checkpoints.clear()

    # --- ChatStorage hooks ---------------------------------------------------------------

    async def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        return await self._append(key, batch, None)

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        paths = self._paths(key)
        if limit is not None and limit <= INLINE_LIMIT:
            return tail_messages(paths.data, paths.lock, limit, self._cache)
        file_size = size(paths.data)
        if file_size is None:
            return []
        if limit is not None:
            if file_size <= INLINE_BYTES:
                return tail_messages(paths.data, paths.lock, limit, self._cache)
            return await anyio.to_thread.run_sync(
                tail_messages, paths.data, paths.lock, limit, self._cache
            )
        if file_size <= INLINE_BYTES:
            return load_message_list(paths.data, paths.lock, self._cache)
        return await anyio.to_thread.run_sync(
            load_message_list, paths.data, paths.lock, self._cache
        )

    async def _session_rows(self, user_id: str, session_id: str) -> list[SessionRow]:
        session_dir = os.path.join(self.root, encode_name(user_id), encode_name(session_id))
        files = session_files(session_dir)
        if sum(file_size for _, _, file_size in files) <= INLINE_BYTES:
            return session_rows(session_dir, files, self._cache)
        return await anyio.to_thread.run_sync(session_rows, session_dir, files, self._cache)

    async def _delete(self, key: ChatKey) -> None:
        paths = self._paths(key)
        await self._locked(paths, rewrite.delete_key, paths, self._forget_key)

    async def _delete_user(self, user_id: str) -> None:
        user_dir = os.path.join(self.root, encode_name(user_id))
        await anyio.to_thread.run_sync(rewrite.delete_user, user_dir)
        self._forget(user_dir, lines=True)

    async def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        return await anyio.to_thread.run_sync(
            keys_with_messages, self.root, user_id, session_id, self._cache
        )

    # --- abilities -----------------------------------------------------------------------

    def _head(self, key: ChatKey) -> Head:
        """The newest message's ``seq`` read from the end of its file, the epoch from its
        first line, the checkpoint's version (one ``stat`` when unchanged); on the loop."""
        paths = self._paths(key)
        epoch, newest, _ = read_since(paths.data, paths.lock, 0, self._cache, limit=1)
        if not newest:
            return EMPTY_HEAD
        return Head(newest, epoch, self._checkpoints.version(paths.ckpt, epoch))

    async def _fetch_since(self, key: ChatKey, after: int) -> Tail:
        """One descriptor (one snapshot), read backwards from the end of the file: the cost
        grows with the tail, not the file. A short tail (a cache catching up) is read on the
        loop; a reader far behind reads the rest on a worker thread."""
        paths = self._paths(key)
        if after:
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
                return Tail(EMPTY_HEAD, (), ())
            if file_size <= INLINE_BYTES:
                epoch, newest, rows = read_since(paths.data, paths.lock, 0, self._cache)
            else:
                epoch, newest, rows = await anyio.to_thread.run_sync(
                    read_since, paths.data, paths.lock, 0, self._cache
                )
        if not newest:
            return Tail(EMPTY_HEAD, (), ())
        head = Head(newest, epoch, self._checkpoints.version(paths.ckpt, epoch))
        return Tail(head, tuple(s for s, _ in rows), tuple(m for _, m in rows))

    def _load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        """The ``.ckpt`` sidecar, when it is of the key's current epoch."""
        paths = self._paths(key)
        checkpoint = self._checkpoints.read(paths.ckpt)
        if checkpoint is None:
            return None
        epoch, newest, _ = read_since(paths.data, paths.lock, 0, self._cache, limit=1)
        if not newest or checkpoint.epoch != epoch:
            return None
        return checkpoint

    async def _checkpoint_version(self, key: ChatKey, version: int) -> SummaryCheckpoint | None:
        """A read of the ``.ckpts`` file (one line per version)."""
        paths = self._paths(key)
        return await anyio.to_thread.run_sync(
            checkpoints.load_version, paths.versions, version, self._derived_unusable
        )

    async def _save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Compare-and-set under the session's flock, written atomically (temporary file,
        fsync, rename)."""
        paths = self._paths(key)
        sync_dir = self.fsync == "always"

        def save() -> SummaryCheckpoint | None:
            reader, cache = self._checkpoints, self._cache
            return checkpoints.save(
                paths, checkpoint, expected_version, reader, cache, sync_dir=sync_dir
            )

        return await self._locked(paths, save)

    async def _acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        """A ``.lease`` file changed under the session's flock: processes exclude each other."""
        paths = self._paths(key)
        return await self._locked(paths, leases.acquire_locked, paths, owner, ttl, self._clock())

    async def _release_lease(self, key: ChatKey, owner: str) -> None:
        paths = self._paths(key)
        await self._locked(paths, leases.release_locked, paths, owner)

    async def _replace(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str | None
    ) -> list[ChatMessage]:
        """The file rewritten whole under the session's flock, its version checked in the
        same critical section (temporary file, fsync, rename, fsync of the directory):
        readers and a crash see the old record or the new one."""
        paths = self._paths(key)
        await self._locked(
            paths,
            rewrite.replace_key,
            paths,
            key,
            batch,
            expected_version,
            self._cache,
            self._forget_key,
        )
        return list(batch)

    async def _save_messages_if(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str
    ) -> list[ChatMessage]:
        """The version checked under the session's flock in the same critical section as
        the append."""
        paths = self._paths(key)
        if not batch:
            version = self._head(key).version
            if version != expected_version:
                raise conflict(key, expected_version, version)
            return []

        def check(fd: int) -> None:
            _, newest = read_back(fd, paths.data, paths.lock, self._cache, 1, 0)
            version = (Head(newest, epoch_of(fd)) if newest else EMPTY_HEAD).version
            if version != expected_version:
                raise conflict(key, expected_version, version)

        return await self._append(key, batch, check)

    async def _list_sessions(
        self, user_id: str, limit: int, after: tuple[int, str] | None, bound: int | None
    ) -> SessionPage:
        if after is None and bound is None:
            # The walk of the directories is no snapshot: a session saved to behind it
            # must count as moved, so the walk is bounded by the clock before it starts.
            bound = to_us(self._now())
        infos, positions = await anyio.to_thread.run_sync(user_sessions, self.root, user_id, bound)
        return page_of(infos, limit, after, bound, positions)

    async def _search(
        self, user_id: str, query: str, terms: list[str], limit: int
    ) -> list[SearchHit]:
        items = await anyio.to_thread.run_sync(user_messages, self.root, user_id, self._cache)
        return scan_search(query, items, limit=limit)

    async def _save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """A line of its own kind in the key's file (its ``seq`` from the session's counter)."""
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            stored = await anyio.to_thread.run_sync(self._writer.append_record, paths, key, record)
            if stored is not None:
                return stored
            found = await anyio.to_thread.run_sync(
                load_records, paths.data, paths.lock, self._cache
            )
        return next(r for r in found if r.id == record.id)

    async def _fetch_records(self, key: ChatKey, kind: str | None) -> list[ConversationRecord]:
        """A read of the whole file."""
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

    async def _timeline(self, key: ChatKey) -> Timeline:
        """A read of the whole file (on a worker thread when it is large)."""
        paths = self._paths(key)
        file_size = size(paths.data)
        if file_size is None:
            return Timeline(EMPTY_HEAD, (), ())
        if file_size <= INLINE_BYTES:
            epoch, found = read_timeline(paths.data, paths.lock, self._cache)
        else:
            epoch, found = await anyio.to_thread.run_sync(
                read_timeline, paths.data, paths.lock, self._cache
            )
        if not found.seqs:
            return found
        version = self._checkpoints.version(paths.ckpt, epoch)
        return attrs.evolve(found, head=attrs.evolve(found.head, checkpoint_version=version))

    async def _rewind(self, key: ChatKey, to: str, rewind_id: str, now: datetime) -> int:
        """The file rewritten whole under the session's flock
        (:mod:`storage.stores.jsonl.timetravel`)."""
        paths = self._paths(key)
        return await self._locked(
            paths,
            rewind_key,
            paths,
            key,
            to,
            rewind_id,
            now,
            self._checkpoints,
            self._forget_key,
            self.fsync == "always",
        )

    async def _purge(self, cutoff: datetime) -> int:
        """Each file touched is rewritten atomically with a new epoch; records stay."""
        return await anyio.to_thread.run_sync(
            rewrite.purge_root, self.root, to_us(cutoff), self._forget_key
        )
