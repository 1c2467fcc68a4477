"""Reading conversations without a lock: a whole file forward, the newest messages backwards
from the end (``fetch(limit)``, ``head``, ``fetch_since``), a file's epoch from its first
line, a session's rows for the merge. Decoded lines come from and go to the
:class:`~storage.stores.jsonl.cache.LineCache`; a skipped line is logged once per process.

Every read opens the file once and reads through that descriptor, so it sees one file: a
rewrite (compaction, ``replace``, a purge) renames a new file over the path, and a reader
holding the old one reads it whole.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Final

from storage.abilities import ConversationRecord, Head, Timeline, mark_rewound
from storage.history import drop_orphaned_results
from storage.message import ChatKey, ChatMessage
from storage.stores.base import EMPTY_HEAD
from storage.stores.jsonl.cache import LineCache
from storage.stores.jsonl.fsutil import O_READ
from storage.stores.jsonl.header import parse_header
from storage.stores.jsonl.lines import (
    Entry,
    Hidden,
    Item,
    Scan,
    continues,
    decode_entry,
    fallback_epoch,
    first_seq,
    read_lines,
    scan,
)
from storage.stores.jsonl.locks import writer_active
from storage.stores.jsonl.names import LOCK_NAME, key_paths
from storage.stores.jsonl.tree import agent_of, all_keys

log = logging.getLogger(__package__)  # one logger for the whole store

_FIRST_CHUNK: Final = 4096

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


# --- forward reads ---------------------------------------------------------------------------


def scan_fd(fd: int, path: str, lock_path: str, cache: LineCache) -> Scan:
    """Every valid line of an open file, forward (entries: ``(offset, seq, item)``).

    Raises:
        OSError: the file cannot be read.
    """
    known = cache.lines(path) or {}
    new: list[tuple[bytes, Entry]] = []

    def parse(line: bytes) -> Entry | None:
        entry = known.get(line)
        if entry is None:
            entry = decode_entry(line)
            if entry is not None:
                new.append((line, entry))
        return entry

    found = scan(read_lines(fd, 0, os.fstat(fd).st_size), parse)
    new.reverse()
    cache.add(path, new)
    _report(path, lock_path, found.skipped, found.last_valid_end)
    return found


def load_items(path: str, lock_path: str, cache: LineCache) -> tuple[str, list[tuple[int, Item]]]:
    """The file's epoch and every valid ``(seq, message or record)`` in file order
    (``("", [])`` when it is missing).

    Raises:
        OSError: the file exists but cannot be read.
    """
    found = _scan_path(path, lock_path, cache)
    if found is None:
        return "", []
    return found.epoch, [(seq, item) for _, seq, item in found.entries]  # type: ignore[misc]


def _scan_path(path: str, lock_path: str, cache: LineCache) -> Scan | None:
    try:
        fd = os.open(path, O_READ)
    except FileNotFoundError:
        return None
    try:
        return scan_fd(fd, path, lock_path, cache)
    finally:
        os.close(fd)


def load_messages(path: str, lock_path: str, cache: LineCache) -> list[tuple[int, ChatMessage]]:
    """Every valid ``(seq, message)`` of a file in file order (``[]`` when it is missing).

    Raises:
        OSError: the file exists but cannot be read.
    """
    found = _scan_path(path, lock_path, cache)
    if found is None:
        return []
    return [(seq, item) for _, seq, item in found.entries if type(item) is ChatMessage]


def load_message_list(path: str, lock_path: str, cache: LineCache) -> list[ChatMessage]:
    """Every valid message of a file in file order (``fetch``: one pass, no seqs).

    Raises:
        OSError: the file exists but cannot be read.
    """
    found = _scan_path(path, lock_path, cache)
    if found is None:
        return []
    return [item for _, _, item in found.entries if type(item) is ChatMessage]


def load_records(path: str, lock_path: str, cache: LineCache) -> list[ConversationRecord]:
    """Every valid record of a file in file order (= ``seq`` order).

    Raises:
        OSError: the file exists but cannot be read.
    """
    _, items = load_items(path, lock_path, cache)
    return [item for _, item in items if type(item) is ConversationRecord]


# --- the epoch --------------------------------------------------------------------------------


def epoch_of(fd: int) -> str:
    """The epoch of an open file: its header's, or from the first line holding a ``seq``
    (``""`` when no line has one).

    Raises:
        OSError: the file cannot be read.
    """
    first = os.pread(fd, 128, 0)  # a version-1 header is 53 bytes
    end = first.find(b"\n")
    if end < 0 and first.startswith(b'{"hdr":'):  # a rewound file's header holds its rewinds
        first = _first_line(fd)
        end = len(first)
    if end >= 0:
        epoch = parse_header(first[:end])
        if epoch is not None:
            return epoch
    for _, line, _ in read_lines(fd, 0, os.fstat(fd).st_size, 4096):
        seq = first_seq(line)
        if seq is not None:
            return fallback_epoch(seq)
    return ""


def _first_line(fd: int) -> bytes:
    """The first line of an open file (without its newline)."""
    for _, line, _ in read_lines(fd, 0, os.fstat(fd).st_size, 4096):
        return line
    return b""


# --- backward reads ---------------------------------------------------------------------------


def read_back(
    fd: int, path: str, lock_path: str, cache: LineCache, limit: int | None, after: int
) -> tuple[list[tuple[int, ChatMessage]], int]:
    """The newest valid messages of an open file, newest first, reading backwards from its
    end: at most ``limit`` (``None``: no limit), stopping at the first with ``seq <= after``;
    and the ``seq`` of the newest valid message (0: none).

    A line counts only when it decodes and, if it belongs to a batch, every later line of that
    batch is there (``to``); records and the header are passed over.

    Raises:
        OSError: the file cannot be read.
    """
    known = cache.lines(path) or {}
    new: list[tuple[bytes, Entry]] = []
    out: list[tuple[int, ChatMessage]] = []
    skipped: list[int] = []
    tail_start = -1  # offset just past the newest valid line
    pos = os.fstat(fd).st_size
    # Sized for ``limit`` lines; a tail after ``after`` (a cache catching up) is usually short.
    # Splitting the chunk into lines is most of a short read's cost, so it is sized for
    # ``limit`` lines (about 768 bytes each), doubling while more are needed.
    chunk = _FIRST_CHUNK if after or limit is None else min(max(_FIRST_CHUNK, limit * 768), 1 << 20)
    carry = b""
    next_ok = False
    next_seq = 0
    next_to: int | None = None
    newest = 0
    done = False
    while pos > 0 and not done:
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
            # An entry is a non-empty tuple: a cached line never reaches the decoder.
            entry = known.get(line) or _decode_new(line, offset, new, skipped)
            if entry is None:  # the header (the last line read), or skipped
                next_ok = False
                continue
            seq, to, item = entry
            ok = to is None or (next_ok and to > seq and continues(seq, to, next_seq, next_to))
            next_ok, next_seq, next_to = ok, seq, to
            if not ok:
                skipped.append(offset)
                continue
            if type(item) is not ChatMessage:
                newest = newest or _head_seq(item, seq)
                continue  # a record or a rewound message: never in the view
            newest = newest or seq  # the first message read is the newest
            if seq <= after:
                done = True
                break
            if tail_start < 0:
                tail_start = offset + len(line) + 1
            out.append((seq, item))
            if len(out) == limit:
                done = True
                break
        carry = parts[0] if start > 0 else b""
        pos = start
        chunk *= 2
    _remember(cache, path, lock_path, new, skipped, tail_start)
    return out, newest


def _head_seq(item: object, seq: int) -> int:
    """What a line that is not a message in the view counts for the head: a rewound message
    its seq, a record nothing."""
    return seq if type(item) is Hidden else 0


def _decode_new(
    line: bytes, offset: int, new: list[tuple[bytes, Entry]], skipped: list[int]
) -> Entry | None:
    """A line the cache does not hold, decoded (and added to ``new``, for the cache); ``None``
    for the header and for a line that does not decode (added to ``skipped``)."""
    if not offset and parse_header(line) is not None:
        return None
    entry = decode_entry(line)
    if entry is None:
        skipped.append(offset)
        return None
    new.append((line, entry))
    return entry


def _remember(
    cache: LineCache,
    path: str,
    lock_path: str,
    new: list[tuple[bytes, Entry]],
    skipped: list[int],
    tail_start: int,
) -> None:
    """After a read: cache the lines it decoded, report the lines it skipped."""
    if new:
        cache.add(path, new)
    if skipped:
        _report(path, lock_path, skipped, tail_start if tail_start >= 0 else 0)


def tail_messages(path: str, lock_path: str, limit: int, cache: LineCache) -> list[ChatMessage]:
    """The newest ``limit`` valid messages, oldest first, reading backwards from the end.

    Reads about ``limit`` lines whatever the file's length. The result never starts with a
    tool result (its call would be missing).

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        fd = os.open(path, O_READ)
    except FileNotFoundError:
        return []
    try:
        rows, _ = read_back(fd, path, lock_path, cache, limit, 0)
    finally:
        os.close(fd)
    out = [message for _, message in reversed(rows)]
    return drop_orphaned_results(out)


def read_since(
    path: str, lock_path: str, after: int, cache: LineCache, limit: int | None = None
) -> tuple[str, int, list[tuple[int, ChatMessage]]]:
    """The key's epoch (``""`` when it holds no message), the ``seq`` of its newest message
    (0: none) and its messages with ``seq > after`` (at most the newest ``limit``), oldest
    first, all from one descriptor: one snapshot.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        fd = os.open(path, O_READ)
    except FileNotFoundError:
        return "", 0, []
    try:
        rows, newest = read_back(fd, path, lock_path, cache, limit, after)
        epoch = epoch_of(fd) if newest else ""
    finally:
        os.close(fd)
    rows.reverse()
    return epoch, newest, rows


def session_rows(
    session_dir: str, files: list[tuple[str, str, int]], cache: LineCache
) -> list[tuple[datetime, int, str, ChatMessage]]:
    """Every agent's messages of a session as ``(created_at, seq, agent_id, message)``, for
    the merge of ``fetch_all_chats`` (``BaseStore`` sorts them).

    ``files`` are the session's ``(name, path, size)`` (``tree.session_files``); a file whose
    name is not a key this store wrote is skipped with a warning.

    Raises:
        OSError: a file exists but cannot be read.
    """
    lock_path = os.path.join(session_dir, LOCK_NAME)
    rows: list[tuple[datetime, int, str, ChatMessage]] = []
    for name, path, size in files:
        if not size:
            continue
        agent = agent_of(session_dir, name)
        if agent is None:
            log.warning("%s: skipped a file whose name is not a key this store wrote", path)
            continue
        found = _scan_path(path, lock_path, cache)
        if found is None:
            continue
        when = {rewind.seq: rewind.created_at.isoformat() for rewind in found.rewinds}
        for _, seq, item in found.entries:
            if type(item) is Hidden:
                message = item.message
                at = when.get(item.rewind_seq)
                message = mark_rewound(message, at) if at is not None else message
            elif type(item) is ChatMessage:
                message = item
            else:
                continue
            assert message.created_at is not None
            rows.append((message.created_at, seq, agent, message))
    return rows


def timeline(path: str, lock_path: str, cache: LineCache) -> tuple[str, Timeline]:
    """The key's whole record (rewound messages included) and rewinds from one read, with
    its epoch and newest message sequence number in the head (the checkpoint version is the
    caller's to add).

    Raises:
        OSError: the file exists but cannot be read.
    """
    found = _scan_path(path, lock_path, cache)
    if found is None:
        return "", Timeline(EMPTY_HEAD, (), ())
    seqs: list[int] = []
    messages: list[ChatMessage] = []
    for _, seq, item in found.entries:
        if type(item) is Hidden:
            item = item.message
        if type(item) is ChatMessage:
            seqs.append(seq)
            messages.append(item)
    if not seqs:
        return "", Timeline(EMPTY_HEAD, (), ())
    head = Head(seqs[-1], found.epoch, 0)
    return found.epoch, Timeline(head, seqs, messages, found.rewinds)


def keys_with_messages(
    root: str, user_id: str | None, session_id: str | None, cache: LineCache
) -> list[ChatKey]:
    """The keys (of one user or session) whose file holds a message: a file may hold only
    records or its header after a replace or a purge (one tail read each)."""
    keys = []
    for key in all_keys(root, user_id, session_id):
        paths = key_paths(root, key.user_id, key.session_id, key.agent_id)
        if read_since(paths.data, paths.lock, 0, cache, 1)[1]:
            keys.append(key)
    return keys


def user_messages(root: str, user_id: str, cache: LineCache) -> list[tuple[ChatKey, ChatMessage]]:
    """Every message of ``user_id`` with its key (each of the user's files read whole,
    decoded lines served from the cache; other users' files are never opened)."""
    items: list[tuple[ChatKey, ChatMessage]] = []
    for key in all_keys(root, user_id, None):
        if key.user_id != user_id:
            continue
        paths = key_paths(root, key.user_id, key.session_id, key.agent_id)
        found = _scan_path(paths.data, paths.lock, cache)
        if found is None:
            continue
        for _, _, item in found.entries:  # rewound messages are searched too (the record)
            if type(item) is Hidden:
                items.append((key, item.message))
            elif type(item) is ChatMessage:
                items.append((key, item))
    return items
