"""Summary checkpoints: one sidecar per key, ``<agent>.ckpt``, beside (never inside) its file.

::

    {"v":1,"version":3,"epoch":"9f86...","covers_to":1718000000000042,"summarizer":"...",
     "created_at":"2024-...","messages":["<codec record>", ...]}

Written whole, atomically (temporary file, fsync, rename) by the holder of the session's
flock, after the compare-and-set checks (``store``); read without a lock. A checkpoint whose
``epoch`` is not the key's current one is void (the key was replaced or purged since). A
sidecar that does not decode (bad JSON, the wrong shape, a message that does not decode, a
newer or unknown format version) is derived data: it counts as none (reported once, so the
store logs and counts it) and the next compare-and-set against version 0 replaces it.

Reads are cached per path by the file's identity (inode, size, mtime): a rewrite renames a new
file over the path, so an unchanged identity means unchanged content and a head read costs one
``stat``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Final

from storage.abilities import SummaryCheckpoint
from storage.codec import decode, encode
from storage.errors import CorruptRecordError, SchemaVersionError
from storage.message import ChatMessage
from storage.stores.jsonl.fsutil import O_READ, write_atomic

Unusable = Callable[[str, object, object], None]  # (what, where, detail): count and log it

_FORMAT: Final = 1
_MAX_CACHED: Final = 4096


def encode_checkpoint(checkpoint: SummaryCheckpoint) -> bytes:
    """The sidecar's bytes (one JSON object and a newline)."""
    body = {
        "v": _FORMAT,
        "version": checkpoint.version,
        "epoch": checkpoint.epoch,
        "covers_to": checkpoint.covers_to,
        "summarizer": checkpoint.summarizer,
        "created_at": checkpoint.created_at.isoformat(),
        "messages": [encode(m) for m in checkpoint.messages],
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def decode_checkpoint(data: bytes) -> SummaryCheckpoint:
    """The checkpoint a sidecar holds.

    Raises:
        CorruptRecordError: the bytes are not a checkpoint this store wrote.
    """
    try:
        raw = json.loads(data)
        if raw.get("v") != _FORMAT:
            raise ValueError(f"unknown format {raw.get('v')!r}")
        version, covers_to = raw["version"], raw["covers_to"]
        epoch, summarizer = raw["epoch"], raw["summarizer"]
        if not (type(version) is int and type(covers_to) is int and isinstance(epoch, str)):
            raise TypeError("bad field types")
        messages: list[ChatMessage] = [decode(m) for m in raw["messages"]]
        return SummaryCheckpoint(
            messages=tuple(messages),
            covers_to=covers_to,
            epoch=epoch,
            summarizer=str(summarizer),
            created_at=datetime.fromisoformat(raw["created_at"]),
            version=version,
        )
    except (
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        CorruptRecordError,
        SchemaVersionError,
    ) as exc:
        raise CorruptRecordError(f"cannot decode a summary checkpoint: {exc!r}") from exc


def write_checkpoint(path: str, checkpoint: SummaryCheckpoint) -> None:
    """Replace the sidecar at ``path`` atomically (the caller holds the session's flock).

    Raises:
        OSError: it cannot be written.
    """
    write_atomic(path, encode_checkpoint(checkpoint))


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

    def drop(self, prefix: str) -> None:
        """Forget every sidecar equal to or under ``prefix`` (erased text leaves memory)."""
        with self._lock:
            for path in [p for p in self._cache if p == prefix or p.startswith(prefix + os.sep)]:
                del self._cache[path]

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._cache.clear()
