"""Compaction: rewrite a conversation's file with only the lines a reader keeps.

Torn and unreadable lines and the lines of incomplete batches are dropped; the valid lines
are copied byte for byte (``seq`` kept), so reads are unchanged. The new file replaces the
old one atomically (temp file, fsync, rename, fsync of the directory), under the session's
flock.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import attrs

from storage.stores.jsonl.fsutil import fsync_dir, tmp_path, unlink, write_atomic
from storage.stores.jsonl.lines import decode_entry, memory_lines, scan
from storage.stores.jsonl.locks import flock
from storage.stores.jsonl.names import Paths


@attrs.frozen(slots=True)
class CompactResult:
    """What ``compact`` did to one file.

    Attributes:
        path: the file.
        kept: valid lines kept (byte for byte).
        dropped: lines dropped (torn, unreadable, lines of incomplete batches).
        bytes_before: the file's size before.
        bytes_after: its size after (equal to ``bytes_before`` when nothing needed dropping).
    """

    path: str
    kept: int
    dropped: int
    bytes_before: int
    bytes_after: int


def compact_file(path: str) -> CompactResult | None:
    """Rewrite ``path`` with only its valid lines (the caller holds the session's flock).

    Returns:
        What was done (nothing is rewritten when nothing needs dropping), or ``None`` when
        the file is missing.

    Raises:
        OSError: the file cannot be read or replaced.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    # Keep exactly the lines a reader keeps, whole batches only, so reads are unchanged.
    found = scan(memory_lines(data), decode_entry)
    header = found.header_line
    kept: list[bytes] = [] if header is None else [header + b"\n"]  # its rewinds too
    for offset, _, _ in found.entries:
        end = data.find(b"\n", offset)
        kept.append(data[offset : end if end >= 0 else len(data)] + b"\n")
    body = b"".join(kept)
    if body == data:
        lines = len(kept) - (found.header is not None)
        return CompactResult(path, lines, 0, len(data), len(data))
    write_atomic(path, body)
    fsync_dir(os.path.dirname(path))
    lines = len(kept) - (found.header is not None)
    return CompactResult(path, lines, len(found.skipped), len(data), len(body))


def compact_files(
    paths: Paths, files: list[str], synced: Callable[[str], None]
) -> list[CompactResult]:
    """Compact ``files`` of the session ``paths`` under its flock (none if it has no lock).

    ``synced`` is told of each file rewritten (the rewrite fsyncs it): the store takes it off
    its list of files awaiting a ``"batch"`` fsync. A clean file is left alone and stays on it.

    Raises:
        OSError: a file cannot be read or replaced.
    """
    results = []
    with flock(paths, make_dirs=False) as lock_fd:
        if lock_fd is None:
            return []
        for path in files:
            unlink(tmp_path(path))  # left by a compaction that crashed
            done = compact_file(path)
            if done is not None:
                results.append(done)
                if done.bytes_after != done.bytes_before:
                    synced(path)
    return results
