"""File-system steps the JSONL store shares: fsyncs, tolerant listing and removal, and
atomic replacement of a file through a temporary one next to it.

Missing files and directories are normal here (another process may have deleted a
conversation): the helpers treat them as empty or already gone instead of raising.
"""

from __future__ import annotations

import errno
import os
from contextlib import suppress
from typing import Final

O_READ: Final = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
_O_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
_TMP_SUFFIX: Final = ".tmp"


def tmp_path(path: str) -> str:
    """The temporary file that replaces ``path``: hidden, next to it (same file system)."""
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}{_TMP_SUFFIX}")


def write_atomic(path: str, body: bytes, *, sync: bool = True, tmp: str | None = None) -> None:
    """Replace ``path`` by ``body`` (0600): written to a temporary file (:func:`tmp_path`
    unless ``tmp`` names another), fsynced (unless ``sync`` is false), renamed.

    Readers and a crash see the old file or the new one, never a part. The directory entry
    is not fsynced here (the caller does it when the rename must be durable). A failed write
    removes its temporary file.

    Raises:
        OSError: the temporary file cannot be written or renamed.
    """
    tmp = tmp or tmp_path(path)
    fd = os.open(tmp, _O_CREATE, 0o600)
    try:
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        unlink(tmp)
        raise


def fsync_dir(path: str) -> None:
    """Fsync a directory, making the entries created or renamed in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_paths(paths: list[str]) -> None:
    """Fsync each file that still exists."""
    for path in paths:
        try:
            fd = os.open(path, O_READ)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def size(path: str) -> int | None:
    """The file's size in bytes, or ``None`` when it is missing."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def listdir(path: str) -> list[str]:
    """The names in a directory; ``[]`` when it is missing or not a directory."""
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def unlink(path: str) -> None:
    """Remove a file unless it is already gone."""
    with suppress(FileNotFoundError):
        os.unlink(path)


def rmdir_if_empty(path: str) -> None:
    """Remove a directory if it is empty; gone or not empty is not an error."""
    try:
        os.rmdir(path)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
            raise
