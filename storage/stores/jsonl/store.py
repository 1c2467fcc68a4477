"""``JsonlChatStorage``: the protocol over the JSON-lines files, and where each step runs.

Threads: a thread hop costs ~60-95 µs, more than a small append or tail read, so these run on
the event-loop thread: a tail read is a few ``pread`` calls; an append takes the flock without
blocking and writes to the page cache. Whatever could block goes to one worker-thread hop
instead: the flock held by another task or process, an fsync (``"always"``, or ``"batch"``
when due), a scan or a write over 128 KiB, a whole-file read over 128 KiB. Reads take no lock.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

import anyio

from storage.errors import StorageUnavailableError
from storage.history import prepare_batch
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import AsyncContextMixin
from storage.stores.jsonl.cache import LineCache
from storage.stores.jsonl.compact import CompactResult, compact_files
from storage.stores.jsonl.fsutil import fsync_paths, listdir, rmdir_if_empty, size, tmp_path, unlink
from storage.stores.jsonl.locks import SessionLocks, WouldBlock, flock
from storage.stores.jsonl.names import DATA_SUFFIX, Paths, encode_name, key_paths, session_paths
from storage.stores.jsonl.reads import load_messages, merge_session, tail_messages
from storage.stores.jsonl.tree import all_keys, all_sessions, remove_session, session_files
from storage.stores.jsonl.writer import FsyncPolicy, Writer

# Reads up to this size (or tail reads of up to INLINE_LIMIT messages) run on the event loop:
# below it a thread hop (~60-95 µs) would cost more than the read; above it the loop would
# block for milliseconds while a hop adds a few percent.
INLINE_BYTES: Final = 128 * 1024
INLINE_LIMIT: Final = 256


class JsonlChatStorage(AsyncContextMixin):
    """Conversations as append-only JSON-lines files under ``path`` (see
    ``storage.stores.jsonl``).

    Args:
        path: the root directory, created (0700) when missing.
        fsync: when appends reach the disk. ``"always"``: every save is fsynced (with its new
            directory entries) before it returns, durable against power loss. ``"batch"``
            (default): a file is fsynced by the first save at least ``fsync_interval``
            seconds after its last fsync, and on :meth:`aclose` and :meth:`compact`; like
            SQLite's ``synchronous=NORMAL``, a process crash (kill -9) loses nothing and a
            power loss may lose about the last interval. ``"never"``: left to the OS.
        fsync_interval: seconds between fsyncs of one file under ``"batch"``.
        max_cached_keys: conversations whose ids this process keeps in memory for the
            duplicate check (least recently used evicted; an evicted key is rescanned once).
        cache_bytes: budget of the decoded-line cache in bytes of line text (default 32 MiB,
            roughly 30-60 MB of memory when full); 0 disables it, making every fetch decode
            every line it returns.

    Raises:
        StorageUnavailableError: ``path`` cannot be created or is not a directory.
        ValueError: ``fsync`` is not one of the three policies, or ``cache_bytes`` < 0.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy = "batch",
        fsync_interval: float = 1.0,
        max_cached_keys: int = 1024,
        cache_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        if fsync not in ("always", "batch", "never"):
            raise ValueError(f"fsync must be 'always', 'batch' or 'never', not {fsync!r}")
        self.root = os.path.abspath(os.fspath(path))
        self.fsync: FsyncPolicy = fsync
        self.fsync_interval = fsync_interval
        self.max_cached_keys = max_cached_keys
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
        self._closed = False

    # -- helpers -------------------------------------------------------------------------------

    def _paths(self, key: ChatKey) -> Paths:
        return key_paths(self.root, key.user_id, key.session_id, key.agent_id)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailableError(f"JSONL store {self.root!r} is closed")

    def _unavailable(self, what: str, exc: OSError) -> StorageUnavailableError:
        return StorageUnavailableError(f"JSONL store {self.root!r}: cannot {what}: {exc}")

    def _forget(self, prefix: str, *, lines: bool = False) -> None:
        """Drop cached state of every file under ``prefix`` (a file or a directory), and with
        ``lines`` their decoded lines too (erased data leaves memory)."""
        self._writer.forget(prefix)
        if lines:
            self._cache.drop(prefix)

    # -- protocol --------------------------------------------------------------------------------

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        """Append one message; ``[]`` when its id is already stored for ``key``.

        Raises:
            InvalidMessageError: the message is invalid (nothing written).
            StorageUnavailableError: the file cannot be written (nothing stored).
        """
        return await self.save_messages(key, [message])

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        """Append a batch in one write; return the messages newly stored, in order.

        Raises:
            InvalidMessageError: a message is invalid (nothing written).
            StorageUnavailableError: the file cannot be written (nothing stored).
        """
        batch = prepare_batch(messages)
        if not batch:
            return []
        self._check_open()
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            try:
                if self.fsync != "always" and len(batch) <= INLINE_LIMIT:
                    # Uncontended small appends are a few syscalls: cheaper than a thread hop.
                    try:
                        return self._writer.append(paths, key, batch, INLINE_BYTES)
                    except WouldBlock:
                        pass
                return await anyio.to_thread.run_sync(self._writer.append, paths, key, batch)
            except OSError as exc:
                raise self._unavailable(f"append to {paths.data!r}", exc) from exc

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        """The conversation oldest first; with ``limit``, the newest ``limit`` messages read
        backwards from the end of the file, never starting with an orphaned tool result.

        Raises:
            ValueError: ``limit`` is negative.
            StorageUnavailableError: the file exists but cannot be read.
        """
        self._check_open()
        if limit is not None and limit <= 0:
            if limit < 0:
                raise ValueError(f"limit must be >= 0 or None, got {limit}")
            return []
        paths = self._paths(key)
        try:
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
                rows = load_messages(paths.data, paths.lock, self._cache)
            else:
                rows = await anyio.to_thread.run_sync(
                    load_messages, paths.data, paths.lock, self._cache
                )
        except OSError as exc:
            raise self._unavailable(f"read {paths.data!r}", exc) from exc
        return [message for _, message in rows]

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        """Every agent's messages of the session, by ``created_at`` then save order (``seq``).

        Raises:
            InvalidKeyError: ``user_id`` or ``session_id`` is not a valid key part.
            StorageUnavailableError: the session's files cannot be read.
        """
        check_key_part("user_id", user_id)
        check_key_part("session_id", session_id)
        self._check_open()
        session_dir = os.path.join(self.root, encode_name(user_id), encode_name(session_id))
        try:
            files = session_files(session_dir)
            if sum(file_size for _, _, file_size in files) <= INLINE_BYTES:
                return merge_session(session_dir, files, self._cache)
            return await anyio.to_thread.run_sync(merge_session, session_dir, files, self._cache)
        except OSError as exc:
            raise self._unavailable(f"read session {session_dir!r}", exc) from exc

    async def delete(self, key: ChatKey) -> None:
        """Erase one conversation: its file, and its session and user directories once empty.

        Raises:
            StorageUnavailableError: the files cannot be removed.
        """
        self._check_open()
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            try:
                await anyio.to_thread.run_sync(self._delete_sync, paths)
            except OSError as exc:
                raise self._unavailable(f"delete {paths.data!r}", exc) from exc

    def _delete_sync(self, paths: Paths) -> None:
        with flock(paths, make_dirs=False) as lock_fd:
            for path in (paths.data, paths.sidecar, tmp_path(paths.data)):
                if path is not None:
                    unlink(path)
            self._forget(paths.data, lines=True)
            if not any(n.endswith(DATA_SUFFIX) for n in listdir(paths.session_dir)):
                # Writers create data files only under the flock, so none can appear now.
                remove_session(paths.session_dir, held_lock=lock_fd is not None)
        rmdir_if_empty(paths.user_dir)

    async def delete_user(self, user_id: str) -> None:
        """Erase every conversation of a user and the user's directory (right to erasure).

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            StorageUnavailableError: the files cannot be removed.
        """
        check_key_part("user_id", user_id)
        self._check_open()
        user_dir = os.path.join(self.root, encode_name(user_id))
        try:
            await anyio.to_thread.run_sync(self._delete_user_sync, user_dir)
        except OSError as exc:
            raise self._unavailable(f"delete {user_dir!r}", exc) from exc

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

    async def aclose(self) -> None:
        """Fsync what ``"batch"`` left unsynced; the store is unusable afterwards (idempotent).

        Raises:
            StorageUnavailableError: a pending fsync failed.
        """
        if self._closed:
            return
        self._closed = True
        try:
            await self._flush()
        finally:
            self._writer.clear()
            self._cache.clear()

    async def _flush(self) -> None:
        dirty = self._writer.take_dirty()
        if dirty:
            try:
                await anyio.to_thread.run_sync(fsync_paths, dirty)
            except OSError as exc:
                raise self._unavailable("fsync", exc) from exc

    # -- maintenance ---------------------------------------------------------------------------

    async def compact(self, key: ChatKey) -> CompactResult | None:
        """Rewrite one conversation's file without its torn, unreadable or incomplete lines.

        The valid lines are copied byte for byte (``seq`` kept) to a temporary file in the same
        directory, fsynced, and renamed over the file, under the session's locks; readers see
        the old file or the new one. Nothing is rewritten when nothing needs dropping.

        Returns:
            What was done, or ``None`` when the conversation has no file.

        Raises:
            StorageUnavailableError: the file cannot be read or replaced.
        """
        self._check_open()
        paths = self._paths(key)
        async with self._locks.hold(paths.session_dir):
            try:
                done = await anyio.to_thread.run_sync(
                    compact_files, paths, [paths.data], self._writer.mark_synced
                )
            except OSError as exc:
                raise self._unavailable(f"compact {paths.data!r}", exc) from exc
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
        try:
            sessions = await anyio.to_thread.run_sync(all_sessions, self.root)
        except OSError as exc:
            raise self._unavailable("list the store", exc) from exc
        for user_dir, session_dir, files in sessions:
            paths = session_paths(user_dir, session_dir)
            async with self._locks.hold(session_dir):
                try:
                    done = await anyio.to_thread.run_sync(
                        compact_files, paths, files, self._writer.mark_synced
                    )
                except OSError as exc:
                    raise self._unavailable(f"compact {session_dir!r}", exc) from exc
                finally:
                    self._forget(session_dir)
            results.extend(done)
        return results

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """Every key with a non-empty file, sorted (``storage.abilities.ListableStorage``).

        Args:
            user_id: only this user's keys.
            session_id: only keys of this session (of any user unless ``user_id`` is given).

        Raises:
            InvalidKeyError: a filter is given but is not a valid key part.
            StorageUnavailableError: the root cannot be listed.
        """
        if user_id is not None:
            check_key_part("user_id", user_id)
        if session_id is not None:
            check_key_part("session_id", session_id)
        self._check_open()
        try:
            keys = await anyio.to_thread.run_sync(all_keys, self.root, user_id, session_id)
        except OSError as exc:
            raise self._unavailable("list the store", exc) from exc
        keys.sort(key=lambda k: (k.user_id, k.session_id, k.agent_id))
        return keys

    def describe(self) -> str:
        return f"jsonl:///{self.root} (fsync={self.fsync})"  # root is absolute: jsonl:////abs
