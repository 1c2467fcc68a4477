"""A session's locks: an ``anyio.Lock`` per session within a process, and across processes an
``fcntl.flock`` on the session's ``.lock`` file, which also holds the session's seq counter.

POSIX only, on a local file system: over NFS, flock is emulated with fcntl locks, which do
not exclude two descriptors of one process and drop when any one is closed.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Final

from storage.errors import StorageUnavailableError
from storage.keyed_locks import KeyedLocks
from storage.stores.jsonl.fsutil import fsync_dir
from storage.stores.jsonl.names import Paths

_O_LOCK: Final = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW


class WouldBlock(Exception):
    """Work on the event loop stopped before doing anything: retry it on a worker thread."""


class SessionLocks(KeyedLocks[str]):
    """The in-process lock of each session (by its directory), dropped when nobody holds or
    waits on it."""

    __slots__ = ()


def _mkdirs(paths: Paths) -> list[str]:
    """Create the user and session directories (0700), and the store's root (0700, with any
    missing parent) when this is the store's first write; return the ones made."""
    made = []
    for directory in (paths.user_dir, paths.session_dir):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        except FileNotFoundError:
            if directory != paths.user_dir:
                raise  # the user directory went meanwhile: the caller retries
            root = os.path.dirname(directory)
            try:
                os.makedirs(root, 0o700)
                made.append(root)
            except FileExistsError:
                pass  # another writer made it first
            try:
                os.mkdir(directory, 0o700)
            except FileExistsError:
                continue
        made.append(directory)
    return made


@contextmanager
def flock(
    paths: Paths, *, make_dirs: bool = True, blocking: bool = True, sync_dirs: bool = False
) -> Iterator[int | None]:
    """Hold the session's flock; yield the lock file's descriptor.

    The lock file is created when missing; its directories (the store's root too, on the
    store's first write) only with ``make_dirs`` (otherwise ``None`` is yielded: there is no
    session), and with ``sync_dirs`` the entries of the directories made are fsynced. A
    deleter unlinks the lock file while holding it, so after acquiring, the descriptor must
    still be the file at the path; otherwise the lock is stale and we retry on the new one.

    Raises:
        WouldBlock: not ``blocking`` and another task or process holds the lock.
        StorageUnavailableError: the lock file keeps being replaced.
        OSError: the lock file or its directories cannot be created.
    """
    made: list[str] = []
    for _ in range(1000):
        try:
            # Read-write even when only locking: flock emulated over fcntl locks needs it.
            fd = os.open(paths.lock, _O_LOCK, 0o600)
        except FileNotFoundError:
            if not make_dirs:
                yield None
                return
            with suppress(FileNotFoundError):  # a parent was removed concurrently: retry
                made += _mkdirs(paths)
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise WouldBlock from None
            held = os.fstat(fd)
            try:
                current = os.stat(paths.lock, follow_symlinks=False)
            except FileNotFoundError:
                current = None
        except BaseException:
            os.close(fd)
            raise
        if current is None or (current.st_ino, current.st_dev) != (held.st_ino, held.st_dev):
            os.close(fd)
            continue
        try:
            if made and sync_dirs:
                for directory in made:
                    fsync_dir(os.path.dirname(directory))
            yield fd
        finally:
            os.close(fd)  # releases the flock
        return
    raise StorageUnavailableError(f"cannot lock {paths.lock!r}: it keeps being replaced")


def writer_active(lock_path: str) -> bool:
    """Whether another task or process holds the session lock (so a torn tail is in flight)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also releases the shared lock
    return False


def read_counter(lock_fd: int) -> int:
    """The last seq the session reserved (the flock holder reads it)."""
    raw = os.pread(lock_fd, 32, 0)
    try:
        return int(raw)
    except ValueError:
        # A new session: start from the clock in µs, so a session deleted and recreated never
        # reuses a seq (writers recognise their cached file by its last line, seq included).
        return time.time_ns() // 1000


def reserve(lock_fd: int, last: int) -> None:
    """Record ``last`` as reserved, before writing: a crash leaves a gap, never a reused seq."""
    os.pwrite(lock_fd, b"%020d\n" % last, 0)
