"""Reading conversations without a lock: a whole file forward, the newest messages backwards
from the end, a session's files merged in save order. Decoded lines come from and go to the
:class:`~storage.stores.jsonl.cache.LineCache`; a skipped line is logged once per process.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Final

from storage.history import drop_orphaned_results
from storage.message import AgentMessage, ChatMessage
from storage.stores.jsonl.cache import LineCache
from storage.stores.jsonl.fsutil import O_READ
from storage.stores.jsonl.lines import Entry, continues, decode_entry, read_lines, scan
from storage.stores.jsonl.locks import writer_active
from storage.stores.jsonl.names import LOCK_NAME
from storage.stores.jsonl.tree import agent_of

log = logging.getLogger(__package__)  # one logger for the whole store

_FIRST_CHUNK: Final = 16384

# --- warnings ---------------------------------------------------------------------------------

_warned: set[tuple[str, int]] = set()
_warned_lock = threading.Lock()


def _warn_skipped(path: str, offsets: Sequence[int]) -> None:
    """Log each skipped line once per process (a damaged file is read many times)."""
    fresh = []
    with _warned_lock:
        if len(_warned) > 100_000:
            _warned.clear()
        for offset in offsets:
            if (path, offset) not in _warned:
                _warned.add((path, offset))
                fresh.append(offset)
    for offset in fresh:
        log.warning(
            "%s: skipped a torn or unreadable line at byte %d (left by a crash during a write "
            "or by an edit; `compact` removes it)",
            path,
            offset,
        )


def _report(path: str, lock_path: str, skipped: Sequence[int], tail_start: int) -> None:
    """Warn about skipped lines; those after the last valid one may be a write in progress."""
    if not skipped:
        return
    tail = [o for o in skipped if o >= tail_start]
    if tail and writer_active(lock_path):
        skipped = [o for o in skipped if o < tail_start]
    _warn_skipped(path, skipped)


# --- reads ------------------------------------------------------------------------------------


def load_messages(path: str, lock_path: str, cache: LineCache) -> list[tuple[int, ChatMessage]]:
    """Every valid ``(seq, message)`` of a file in file order (``[]`` when it is missing).

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        fd = os.open(path, O_READ)
    except FileNotFoundError:
        return []
    known = cache.lines(path) or {}
    new: list[tuple[bytes, Entry]] = []

    def parse(line: bytes) -> Entry | None:
        entry = known.get(line)
        if entry is None:
            entry = decode_entry(line)
            if entry is not None:
                new.append((line, entry))
        return entry

    try:
        found = scan(read_lines(fd, 0, os.fstat(fd).st_size), parse)
    finally:
        os.close(fd)
    new.reverse()
    cache.add(path, new)
    _report(path, lock_path, found.skipped, found.last_valid_end)
    return [(seq, payload) for _, seq, payload in found.entries]  # type: ignore[misc]


def tail_messages(path: str, lock_path: str, limit: int, cache: LineCache) -> list[ChatMessage]:
    """The newest ``limit`` valid messages, oldest first, reading backwards from the end.

    Reads about ``limit`` lines whatever the file's length. A line counts only when it decodes
    and, if it belongs to a batch, every later line of that batch is there (``to``). The
    result never starts with a tool result (its call would be missing).

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        fd = os.open(path, O_READ)
    except FileNotFoundError:
        return []
    known = cache.lines(path) or {}
    new: list[tuple[bytes, Entry]] = []
    out: list[ChatMessage] = []
    skipped: list[int] = []
    tail_start = -1  # offset just past the newest valid line
    try:
        pos = os.fstat(fd).st_size
        chunk = min(max(_FIRST_CHUNK, limit * 512), 1 << 20)
        carry = b""
        next_ok = False
        next_seq = 0
        next_to: int | None = None
        while pos > 0:
            start = pos - chunk if pos > chunk else 0
            buf = os.pread(fd, pos - start, start)
            if len(buf) != pos - start:  # truncated under us: keep what was read
                break
            if carry:
                buf += carry
            parts = buf.split(b"\n")
            end = start + len(buf)
            first_kept = 1 if start > 0 else 0
            for i in range(len(parts) - 1, first_kept - 1, -1):
                line = parts[i]
                offset = end - len(line)
                end = offset - 1
                if not line:
                    next_ok = False  # an empty line ends any batch (or is the final newline)
                    continue
                entry = known.get(line)
                if entry is None:
                    entry = decode_entry(line)
                    if entry is None:
                        skipped.append(offset)
                        next_ok = False
                        continue
                    new.append((line, entry))
                seq, to, message = entry
                ok = to is None or (next_ok and to > seq and continues(seq, to, next_seq, next_to))
                next_ok, next_seq, next_to = ok, seq, to
                if not ok:
                    skipped.append(offset)
                    continue
                if tail_start < 0:
                    tail_start = offset + len(line) + 1
                out.append(message)
                if len(out) == limit:
                    break
            if len(out) == limit:
                break
            carry = parts[0] if start > 0 else b""
            pos = start
            chunk *= 2
    finally:
        os.close(fd)
    if new:
        cache.add(path, new)
    if skipped:
        _report(path, lock_path, skipped, tail_start if tail_start >= 0 else 0)
    out.reverse()
    return drop_orphaned_results(out)


def merge_session(
    session_dir: str, files: list[tuple[str, str, int]], cache: LineCache
) -> list[AgentMessage]:
    """Every agent's messages of a session by ``created_at``, then save order (``seq``).

    ``files`` are the session's ``(name, path, size)`` (``tree.session_files``); a file whose
    name is not a key this store wrote is skipped with a warning.

    Raises:
        OSError: a file exists but cannot be read.
    """
    lock_path = os.path.join(session_dir, LOCK_NAME)
    rows: list[tuple[datetime, int, int, int, str, ChatMessage]] = []
    for file_no, (name, path, size) in enumerate(files):
        if not size:
            continue
        agent = agent_of(session_dir, name)
        if agent is None:
            log.warning("%s: skipped a file whose name is not a key this store wrote", path)
            continue
        for line_no, (seq, message) in enumerate(load_messages(path, lock_path, cache)):
            assert message.created_at is not None
            rows.append((message.created_at, seq, file_no, line_no, agent, message))
    rows.sort(key=lambda row: row[:4])
    return [AgentMessage(agent, message) for *_, agent, message in rows]
