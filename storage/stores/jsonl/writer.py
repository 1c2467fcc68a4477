"""The append path: one ``write(2)`` of whole lines per save, under the session's flock.

Before appending, the writer brings its cached view of the file's message ids up to date
(only the bytes other processes appended since are read), so a retried id is a no-op across
processes too; it then reserves the batch's seqs in the session's counter, writes, and applies
the fsync policy. A failed append is truncated away: a failed save stores nothing.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Literal

import attrs

from storage.abilities import ConversationRecord
from storage.message import ChatKey, ChatMessage
from storage.stores.epochs import new_epoch
from storage.stores.jsonl.fsutil import fsync_dir, fsync_paths
from storage.stores.jsonl.header import format_header
from storage.stores.jsonl.lines import (
    TORN_MARK,
    IdKey,
    format_batch,
    format_record,
    parse_id,
    parse_torn_id,
    read_lines,
    record_key,
    scan,
)
from storage.stores.jsonl.locks import WouldBlock, flock, read_counter, reserve
from storage.stores.jsonl.names import Paths, read_sidecar, write_sidecar

log = logging.getLogger(__package__)  # one logger for the whole store

FsyncPolicy = Literal["always", "batch", "never"]

_O_APPEND: Final = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
_MAX_DIRTY: Final = 4096

# Called under the flock with the data file's descriptor before anything is written (the
# version check of ``save_messages_if``); raises to write nothing.
Precondition = Callable[[int], None]


@attrs.define(slots=True)
class KeyState:
    """What this process knows of one file, valid while its identity checks pass.

    ``size`` bytes have been scanned; ``head`` is the start of the last line scanned (at
    ``head_at``): before appending, under the flock, the writer checks the inode, that the
    file did not shrink and that ``head`` is still there, then scans only what other
    processes appended since. Any mismatch (compaction, deletion, a new file) rescans.
    """

    dev: int
    ino: int
    size: int = 0
    head_at: int = 0
    head: bytes = b""
    ids: set[IdKey] = attrs.Factory(set)  # message ids, and record ids (record_key)
    max_seq: int = 0
    terminator: bytes = b""  # what the next write must start with (a torn tail's end)
    sidecar_ok: bool = False
    synced_at: float = 0.0  # monotonic time of the last fsync ("batch")
    dir_unsynced: bool = False  # the file is new: fsync its directory with it


def _truncate(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:  # pragma: no cover - the original error is what matters
        log.exception("cannot undo a failed append")


class Writer:
    """Appends to a store's files; keeps a :class:`KeyState` per file (the least recently
    written beyond ``max_cached_keys`` evicted) and, under ``"batch"``, the files written
    since their last fsync. Worker threads append too: one ``threading.Lock`` guards both.

    Args:
        fsync: the policy (see ``JsonlChatStorage``).
        fsync_interval: seconds between fsyncs of one file under ``"batch"``.
        max_cached_keys: files whose state is kept.
    """

    __slots__ = ("_dirty", "_mutex", "_states", "fsync", "fsync_interval", "max_cached_keys")

    def __init__(self, fsync: FsyncPolicy, fsync_interval: float, max_cached_keys: int) -> None:
        self.fsync: FsyncPolicy = fsync
        self.fsync_interval = fsync_interval
        self.max_cached_keys = max_cached_keys
        self._states: OrderedDict[str, KeyState] = OrderedDict()
        self._dirty: set[str] = set()  # files written since their last fsync ("batch")
        self._mutex = threading.Lock()  # guards the two above

    def append(
        self,
        paths: Paths,
        key: ChatKey,
        batch: list[ChatMessage],
        inline_bytes: int | None = None,
        precondition: Precondition | None = None,
    ) -> list[ChatMessage]:
        """Append the messages of ``batch`` not yet in the file; return them.

        ``inline_bytes`` is set on the event loop: the call then raises :class:`WouldBlock`,
        having written nothing, wherever the work could block (the flock is held elsewhere,
        an fsync is due, the sidecar must be written, more than ``inline_bytes`` would be
        scanned or written), and the caller retries on a worker thread. ``precondition`` runs
        under the flock before anything is written.

        Raises:
            WouldBlock: see ``inline_bytes``.
            OSError: the file cannot be written (nothing stored).
            StorageUnavailableError: the session's lock file keeps being replaced.
            Exception: what ``precondition`` raised (nothing stored).
        """
        inline = inline_bytes is not None
        with flock(paths, blocking=not inline, sync_dirs=self.fsync == "always") as lock_fd:
            assert lock_fd is not None
            fd = os.open(paths.data, _O_APPEND, 0o600)
            try:
                if precondition is not None:
                    precondition(fd)
                return self._append_locked(paths, key, batch, lock_fd, fd, inline_bytes)
            except WouldBlock:
                raise
            except BaseException:
                self.forget(paths.data)
                raise
            finally:
                os.close(fd)

    def append_record(
        self, paths: Paths, key: ChatKey, record: ConversationRecord
    ) -> ConversationRecord | None:
        """Append ``record`` (``created_at`` set) unless its id is in the file; return it as
        stored (with its ``seq``), or ``None`` when it was there already.

        Raises:
            OSError: the file cannot be written (nothing stored).
            TypeError, ValueError: the record's data is not JSON data (nothing stored).
        """
        with flock(paths, sync_dirs=self.fsync == "always") as lock_fd:
            assert lock_fd is not None
            fd = os.open(paths.data, _O_APPEND, 0o600)
            try:
                stored: list[ConversationRecord] = []

                def lines(first: int) -> list[bytes]:
                    stored.append(attrs.evolve(record, seq=first))
                    return [format_record(first, record)]

                count = self._write_locked(
                    paths, key, [record_key(record.id)], lines, lock_fd, fd, None
                )
                return stored[0] if count else None
            except BaseException:
                self.forget(paths.data)
                raise
            finally:
                os.close(fd)

    def _append_locked(
        self,
        paths: Paths,
        key: ChatKey,
        batch: list[ChatMessage],
        lock_fd: int,
        fd: int,
        inline_bytes: int | None,
    ) -> list[ChatMessage]:
        stored: list[ChatMessage] = []

        def lines(first: int) -> list[bytes]:
            return format_batch(first, stored)

        ids: list[IdKey] = [m.id for m in batch]

        def select(new_ids: set[IdKey]) -> None:
            stored.extend(m for m in batch if m.id in new_ids)

        self._write_locked(paths, key, ids, lines, lock_fd, fd, inline_bytes, select)
        return stored

    def _write_locked(
        self,
        paths: Paths,
        key: ChatKey,
        ids: list[IdKey],
        make_lines: Callable[[int], list[bytes]],
        lock_fd: int,
        fd: int,
        inline_bytes: int | None,
        select: Callable[[set[IdKey]], None] | None = None,
    ) -> int:
        """Write the lines of the items whose ids are not in the file yet (under the flock);
        return how many were written."""
        inline = inline_bytes is not None
        st = os.fstat(fd)
        state = self._sync_state(paths.data, fd, st, inline_bytes)
        self._remember(paths.data, state)
        new_ids = {i for i in ids if i not in state.ids}
        if not new_ids:
            return 0
        if select is not None:
            select(new_ids)
        if paths.sidecar is not None and not state.sidecar_ok:
            if inline:
                raise WouldBlock  # writing it fsyncs
            expected = [key.user_id, key.session_id, key.agent_id]
            if read_sidecar(paths.sidecar) != expected:
                write_sidecar(paths.sidecar, key)
            state.sidecar_ok = True
        now = time.monotonic()
        due = self.fsync == "always" or (
            self.fsync == "batch" and now - state.synced_at >= self.fsync_interval
        )
        if inline and (due or len(self._dirty) >= _MAX_DIRTY):
            raise WouldBlock
        first = max(read_counter(lock_fd), state.max_seq) + 1
        last = first + len(new_ids) - 1
        lines = make_lines(first)
        payload = state.terminator + b"".join(lines)
        if not st.st_size:  # a new file starts with its header: the key's epoch
            payload = format_header(new_epoch()) + payload
        if inline_bytes is not None and len(payload) > inline_bytes:
            raise WouldBlock
        reserve(lock_fd, last)
        try:
            written = os.write(fd, payload)
            if written != len(payload):  # disk full
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(payload)} bytes)")
            self._after_write(paths, fd, state, due, now)
        except BaseException:
            _truncate(fd, st.st_size)  # a failed save stores nothing (we hold the flock)
            raise
        size = st.st_size + len(payload)
        state.size = size
        state.head_at = size - len(lines[-1])
        state.head = lines[-1][:48]
        state.ids.update(new_ids)
        state.max_seq = last
        state.terminator = b""
        return len(new_ids)

    def _sync_state(self, path: str, fd: int, st: os.stat_result, max_scan: int | None) -> KeyState:
        """The file's state, rescanned or extended to its current end (under the flock).

        Raises:
            WouldBlock: more than ``max_scan`` bytes would have to be scanned.
        """
        with self._mutex:
            state = self._states.get(path)
        if state is not None and (
            state.ino != st.st_ino
            or state.dev != st.st_dev
            or st.st_size < state.size
            or (state.head and os.pread(fd, len(state.head), state.head_at) != state.head)
        ):
            state = None
        if max_scan is not None and st.st_size - (state.size if state else 0) > max_scan:
            raise WouldBlock
        if state is None:
            # The fsync clock of "batch" starts now; a new file's directory entry is unsynced.
            state = KeyState(st.st_dev, st.st_ino, synced_at=time.monotonic())
            state.dir_unsynced = st.st_size == 0
        if st.st_size > state.size:
            found = scan(read_lines(fd, state.size, st.st_size), parse_id, parse_torn_id)
            state.ids.update(payload for _, _, payload in found.entries)  # type: ignore[misc]
            if found.max_seq > state.max_seq:
                state.max_seq = found.max_seq
            if found.last_line_at >= 0:
                state.head_at = found.last_line_at
                state.head = os.pread(fd, 48, found.last_line_at)
            state.size = st.st_size
            # A torn tail is ended by the next write: a plain newline keeps a whole record
            # that only lacked it; anything else gets a mark that no parser accepts.
            if found.open_tail is None:
                state.terminator = b""
            else:
                state.terminator = b"\n" if found.open_tail else TORN_MARK
        return state

    def _after_write(self, paths: Paths, fd: int, state: KeyState, due: bool, now: float) -> None:
        """Apply the fsync policy to a file just appended to (``due``: fsync it now)."""
        if due:
            os.fsync(fd)
            if state.dir_unsynced:
                fsync_dir(paths.session_dir)
                state.dir_unsynced = False
            state.synced_at = now
            if self.fsync == "batch":
                self.mark_synced(paths.data)
            return
        if self.fsync != "batch":
            return
        backlog: list[str] = []
        with self._mutex:
            self._dirty.add(paths.data)
            if len(self._dirty) > _MAX_DIRTY:  # many idle files: sync them now, bounded
                backlog = list(self._dirty)
                self._dirty.clear()
        if backlog:
            fsync_paths(backlog)

    def _remember(self, path: str, state: KeyState) -> None:
        with self._mutex:
            self._states[path] = state
            self._states.move_to_end(path)
            while len(self._states) > self.max_cached_keys:
                self._states.popitem(last=False)

    def forget(self, prefix: str) -> None:
        """Drop the state of every file equal to or under ``prefix`` (a file or a directory)."""
        with self._mutex:
            for path in [p for p in self._states if p == prefix or p.startswith(prefix + os.sep)]:
                del self._states[path]

    def mark_synced(self, path: str) -> None:
        """Take a file off the list of those awaiting a ``"batch"`` fsync."""
        with self._mutex:
            self._dirty.discard(path)

    def take_dirty(self) -> list[str]:
        """The files awaiting a ``"batch"`` fsync, taking them off the list (the caller
        fsyncs them)."""
        with self._mutex:
            dirty = list(self._dirty)
            self._dirty.clear()
        return dirty

    def clear(self) -> None:
        """Forget every file's state."""
        with self._mutex:
            self._states.clear()
