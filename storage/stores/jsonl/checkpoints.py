"""Summary checkpoints: one sidecar per key, ``<agent>.ckpt``, beside (never inside) its file.

::

    {"v":1,"version":3,"epoch":"9f86...","covers_to":1718000000000042,"summarizer":"...",
     "created_at":"2024-...","messages":["<codec record>", ...]}

Written whole, atomically (temporary file, fsync, rename) by the holder of the session's
flock, after the compare-and-set checks (:func:`save`); read without a lock. The payload is
:mod:`storage.stores.payloads`'s. A checkpoint whose
``epoch`` is not the key's current one is void (the key was replaced or purged since). A
sidecar that does not decode (bad JSON, the wrong shape, a message that does not decode, a
newer or unknown format version) is derived data: it counts as none (reported once, so the
store logs and counts it) and the next compare-and-set against version 0 replaces it.

Reads are cached per path by the file's identity (inode, size, mtime): a rewrite renames a new
file over the path, so an unchanged identity means unchanged content and a head read costs one
``stat``.

Every version stored is also appended to ``<agent>.ckpts`` (one payload per line, fsynced), which
:func:`load_version` reads; a ``replace`` or a purge removes it with the sidecar. A rewind that
voids the checkpoint leaves the sidecar as it is: its epoch then differs from the key's only in
the rewind part (:func:`storage.stores.jsonl.header.file_epoch`), so its version still counts as
the head's, and the next compare-and-set makes the version after it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Final

import attrs

from storage.abilities import SummaryCheckpoint
from storage.errors import CorruptRecordError
from storage.message import ChatMessage
from storage.stores.jsonl.cache import LineCache
from storage.stores.jsonl.fsutil import O_READ, fsync_dir, write_atomic
from storage.stores.jsonl.header import file_epoch
from storage.stores.jsonl.locks import flock
from storage.stores.jsonl.names import Paths
from storage.stores.jsonl.reads import load_items
from storage.stores.payloads import decode_checkpoint, encode_checkpoint

__all__ = ["CheckpointReader", "load_version", "save", "store", "write_checkpoint"]

Unusable = Callable[[str, object, object], None]  # (what, where, detail): count and log it

_MAX_CACHED: Final = 4096


def write_checkpoint(path: str, checkpoint: SummaryCheckpoint) -> None:
    """Replace the sidecar at ``path`` atomically (the caller holds the session's flock).

    Raises:
        OSError: it cannot be written.
    """
    write_atomic(path, encode_checkpoint(checkpoint).encode("utf-8") + b"\n")


def save(
    paths: Paths,
    checkpoint: SummaryCheckpoint,
    expected: int,
    reader: CheckpointReader,
    cache: LineCache,
    *,
    sync_dir: bool,
) -> SummaryCheckpoint | None:
    """Compare-and-set the key's checkpoint under the session's flock: stored as version
    ``expected + 1`` only if the current one's version is ``expected``, its epoch the key's
    and ``covers_to`` the ``seq`` of a message the key holds; with ``sync_dir`` the rename is
    fsynced too.

    Raises:
        OSError: a file cannot be read or written.
    """
    with flock(paths, make_dirs=False) as lock_fd:
        if lock_fd is None:
            return None  # no session: the key holds nothing
        epoch, items = load_items(paths.data, paths.lock, cache)
        seqs = {seq for seq, item in items if type(item) is ChatMessage}
        if not seqs or checkpoint.epoch != epoch or checkpoint.covers_to not in seqs:
            return None
        if reader.version(paths.ckpt, epoch) != expected:
            return None
        stored = attrs.evolve(checkpoint, version=expected + 1)
        store(paths, stored, sync_dir=sync_dir)
        return stored


def store(paths: Paths, checkpoint: SummaryCheckpoint, *, sync_dir: bool) -> None:
    """Write ``checkpoint`` (its version set) as the key's current one and append it to its
    versions (the caller holds the session's flock).

    Raises:
        OSError: a file cannot be written.
    """
    line = encode_checkpoint(checkpoint).encode("utf-8")
    fd = os.open(paths.versions, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, b"\n" + line + b"\n")  # a line torn by a crash never joins the next
        os.fsync(fd)
    finally:
        os.close(fd)
    write_checkpoint(paths.ckpt, checkpoint)
    if sync_dir:  # the rename too must survive a power loss
        fsync_dir(paths.session_dir)


def load_version(path: str, version: int, unusable: Unusable) -> SummaryCheckpoint | None:
    """Version ``version`` from the versions file at ``path``, or ``None`` (not there; a
    line that does not decode is reported and skipped).

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    needle = b'"version":%d,' % version
    for line in data.split(b"\n"):
        if needle not in line:
            continue
        try:
            found = decode_checkpoint(line)
        except CorruptRecordError as exc:
            unusable("checkpoint version", path, exc)
            continue
        if found.version == version:
            return found
    return None


class CheckpointReader:
    """Reads checkpoint sidecars, caching each decoded one by the file's identity; an
    unreadable one is reported to ``unusable`` once per version of the file."""

    __slots__ = ("_cache", "_lock", "_unusable")

    def __init__(self, unusable: Unusable) -> None:
        self._cache: dict[str, tuple[tuple[int, int, int, int], SummaryCheckpoint | None]] = {}
        self._lock = threading.Lock()
        self._unusable = unusable

    def read(self, path: str) -> SummaryCheckpoint | None:
        """The checkpoint at ``path`` (any epoch), or ``None`` (missing or undecodable).

        Raises:
            OSError: it exists but cannot be read.
        """
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            cached = self._cache.get(path)
        if cached is not None and cached[0] == identity:
            return cached[1]
        try:
            fd = os.open(path, O_READ)
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            data = os.pread(fd, st.st_size, 0)
        finally:
            os.close(fd)
        checkpoint: SummaryCheckpoint | None
        try:
            checkpoint = decode_checkpoint(data)
        except CorruptRecordError as exc:
            self._unusable("checkpoint", path, exc)
            checkpoint = None
        with self._lock:
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            self._cache[path] = (identity, checkpoint)
        return checkpoint

    def version(self, path: str, epoch: str) -> int:
        """The version of the checkpoint at ``path`` when it is of ``epoch``, or of the same
        file with an earlier rewind (a checkpoint a rewind voided), else 0.

        Raises:
            OSError: it exists but cannot be read.
        """
        checkpoint = self.read(path)
        if checkpoint is None:
            return 0
        if checkpoint.epoch == epoch or file_epoch(checkpoint.epoch) == file_epoch(epoch):
            return checkpoint.version
        return 0

    def drop(self, prefix: str) -> None:
        """Forget every sidecar equal to or under ``prefix`` (erased text leaves memory)."""
        with self._lock:
            for path in [p for p in self._cache if p == prefix or p.startswith(prefix + os.sep)]:
                del self._cache[path]

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._cache.clear()
