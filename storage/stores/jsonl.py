"""``jsonl://PATH``: one append-only JSON-lines file per conversation, safe across processes.

Layout (every name is built from the key by :func:`encode_name`, never from raw text)::

    PATH/<user>/<session>/.lock            flock + the session's sequence counter
    PATH/<user>/<session>/<agent>.jsonl    the conversation, one message per line
    PATH/<user>/<session>/<agent>.key      only when a part was hashed: the full key (JSON)

Directories are created 0700 and files 0600. A line is the codec record (``storage.codec``)
with the store's fields spliced in front::

    {"seq":1718000000000001,"to":1718000000000003,"v":1,"id":"...","at":"...","m":{...}}

``seq`` is unique and increasing within a session (all agents), so ``fetch_all_chats`` merges
agents in save order. ``to`` marks the lines of a multi-message batch that are not its last
(it names the batch's last ``seq``): a reader keeps a batch only when all of its lines are
there, so a batch is never half visible, not even while it is being written or after a crash.
A line that does not decode (a torn tail left by a crash, an edit) is skipped with a warning
logged once per process. The next writer ends a torn tail with `` torn`` and a newline (just a
newline when it is a whole record that only lacked it), so its own lines start fresh and the
fragment can never parse; :meth:`JsonlChatStorage.compact` removes such lines.

Writes: one ``write(2)`` of whole lines per save, under an in-process per-session lock and an
``fcntl.flock`` on the session's ``.lock`` across processes. Before appending, the writer
brings its cached view of the file's message ids up to date under the flock (only the bytes
other processes appended since are read), so a retried id is a no-op across processes too.

Threads: a thread hop costs ~60-95 µs, more than a small append or tail read, so these run on
the event-loop thread: a tail read is a few ``pread`` calls; an append takes the flock without
blocking and writes to the page cache. Whatever could block goes to one worker-thread hop
instead: the flock held by another task or process, an fsync (``"always"``, or ``"batch"``
when due), a scan or a write over 128 KiB, a whole-file read over 128 KiB. Reads take no lock.

POSIX only (``fcntl.flock``), on a local file system: over NFS, flock is emulated with fcntl
locks, which do not exclude two descriptors of one process and drop when any one is closed.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from datetime import datetime
from functools import lru_cache
from typing import Final, Literal, TypeVar
from urllib.parse import unquote_to_bytes

import anyio
import attrs

from storage.codec import decode, encode
from storage.errors import CorruptRecordError, StorageUnavailableError
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import AsyncContextMixin
from storage.stores.base import prepare_batch

__all__ = ["CompactResult", "FsyncPolicy", "JsonlChatStorage", "decode_name", "encode_name"]

log = logging.getLogger(__name__)

FsyncPolicy = Literal["always", "batch", "never"]
T = TypeVar("T")

# --- names ------------------------------------------------------------------------------------

_PLAIN: Final = re.compile(r"[a-z0-9_-]+")
_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
# Device names Windows reserves whatever the case or extension.
_RESERVED: Final = frozenset(
    {"con", "prn", "aux", "nul"} | {f"com{i}" for i in range(10)} | {f"lpt{i}" for i in range(10)}
)
MAX_NAME: Final = 200  # bytes; leaves room under NAME_MAX (255) for ".jsonl" and temp names
_HASH_KEEP: Final = 100  # readable prefix kept in front of a hashed name


def _utf8(text: str) -> bytes:
    # surrogatepass: a key part may hold a lone surrogate; it still maps to one distinct name.
    return text.encode("utf-8", "surrogatepass")


def encode_name(part: str) -> str:
    """The file-system name of one key part: lowercase, safe on every file system, injective.

    ``[a-z0-9_-]`` stay as they are; every other character (upper case, ``.``, ``/``, ``%``,
    ``~``, non-ASCII) becomes ``%xx`` per UTF-8 byte with lowercase hex, so names never differ
    only by case and never contain a separator or a dot. A Windows device name (``con``,
    ``nul``, ``com1``, ...) gets its first letter escaped. A name longer than
    :data:`MAX_NAME` bytes becomes a readable prefix, ``~`` and the SHA-256 of the part (``~``
    never appears otherwise, so a hashed name cannot equal a plain one).
    """
    if _PLAIN.fullmatch(part) is None:
        name = "".join(
            ch if ch in _SAFE else "".join(f"%{b:02x}" for b in _utf8(ch)) for ch in part
        )
    else:
        name = part
    if name in _RESERVED:
        name = f"%{ord(name[0]):02x}{name[1:]}"
    if len(name) > MAX_NAME:
        cut = _HASH_KEEP
        split = name.rfind("%", cut - 2, cut)  # do not cut an escape in two
        if split != -1:
            cut = split
        name = f"{name[:cut]}~{hashlib.sha256(_utf8(part)).hexdigest()}"
    return name


def decode_name(name: str) -> str | None:
    """The key part a plain name stands for, or ``None`` (hashed, or not a name we make)."""
    if "~" in name:
        return None
    try:
        part = unquote_to_bytes(name).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return part if part and encode_name(part) == name else None


@attrs.frozen(slots=True)
class _Paths:
    user_dir: str
    session_dir: str
    lock: str
    data: str
    sidecar: str | None  # set when a part was hashed: the full key lives there


@lru_cache(maxsize=4096)
def _key_paths(root: str, user_id: str, session_id: str, agent_id: str) -> _Paths:
    user = encode_name(user_id)
    session = encode_name(session_id)
    agent = encode_name(agent_id)
    user_dir = os.path.join(root, user)
    session_dir = os.path.join(user_dir, session)
    hashed = "~" in user or "~" in session or "~" in agent
    return _Paths(
        user_dir,
        session_dir,
        os.path.join(session_dir, LOCK_NAME),
        os.path.join(session_dir, agent + DATA_SUFFIX),
        os.path.join(session_dir, agent + KEY_SUFFIX) if hashed else None,
    )


LOCK_NAME: Final = ".lock"
DATA_SUFFIX: Final = ".jsonl"
KEY_SUFFIX: Final = ".key"
_TMP_SUFFIX: Final = ".tmp"

# --- lines ------------------------------------------------------------------------------------

_SEQ: Final = b'{"seq":'
_TO: Final = b'"to":'
_ID: Final = b'"v":1,"id":"'  # what codec.encode writes first; anything else takes the slow path
_TORN_MARK: Final = b" torn\n"  # ends a torn tail the next writer found: never valid JSON after it


def _head(line: bytes) -> tuple[int, int | None, int] | None:
    """``(seq, to, end of the store's fields)`` of a line, or ``None`` when it is not ours."""
    if not line.startswith(_SEQ):
        return None
    comma = line.find(b",", 7)
    if comma < 0:
        return None
    try:
        seq = int(line[7:comma])
        if line.startswith(_TO, comma + 1):
            end = line.find(b",", comma + 6)
            if end < 0:
                return None
            return seq, int(line[comma + 6 : end]), end + 1
    except ValueError:
        return None
    return seq, None, comma + 1


def _quick_id(line: bytes, start: int) -> str | None:
    """The message id of a well-formed line without parsing the JSON (``None``: not a record).

    The writer's duplicate check uses this; it accepts a line that ends with ``}`` and has an
    id, which every line this store writes and every torn tail it marked satisfy or fail
    exactly as a full decode does.
    """
    if not line.endswith(b"}"):
        return None
    if line.startswith(_ID, start):
        begin = start + len(_ID)
        end = line.find(b'"', begin)
        raw = line[begin:end]
        if end > 0 and b"\\" not in raw:
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
    try:
        value = json.loads(line).get("id")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


Parsed = tuple[int, int | None, T]


def _parse_id(line: bytes) -> Parsed[str] | None:
    head = _head(line)
    if head is None:
        return None
    found = _quick_id(line, head[2])
    return None if found is None else (head[0], head[1], found)


def _continues(prev_seq: int, prev_to: int, seq: int, to: int | None) -> bool:
    """Whether a line ``(seq, to)`` is the next line of the batch ``prev`` belongs to."""
    return seq == prev_seq + 1 and (to == prev_to if to is not None else seq == prev_to)


Line = tuple[int, bytes, bool]  # (offset, bytes without the newline, terminated)


def _lines(fd: int, start: int, end: int, chunk: int = 1 << 20) -> Iterator[Line]:
    """Every line of ``fd`` in ``[start, end)``, read in chunks; a final segment without its
    newline (a torn tail, or a whole record missing only the newline) comes last, unterminated.
    """
    pos = start
    pieces: list[bytes] = []  # a line longer than a chunk, gathered without quadratic copies
    line_at = start
    while pos < end:
        buf = os.pread(fd, min(chunk, end - pos), pos)
        if not buf:
            break  # the file shrank under us: stop at what is there
        buf_at = pos
        pos += len(buf)
        i = 0
        find = buf.find
        while (j := find(b"\n", i)) >= 0:
            if pieces:
                pieces.append(buf[:j])
                yield line_at, b"".join(pieces), True
                pieces.clear()
            else:
                yield buf_at + i, buf[i:j], True
            i = j + 1
            line_at = buf_at + i
        if i < len(buf):
            pieces.append(buf[i:] if i else buf)
    if pieces:
        yield line_at, b"".join(pieces), False


@attrs.define(slots=True)
class _Scan:
    """What a forward pass over lines found: valid entries, skipped offsets, highest seq."""

    entries: list[tuple[int, int, object]] = attrs.Factory(list)  # (offset, seq, payload)
    skipped: list[int] = attrs.Factory(list)
    max_seq: int = 0
    last_valid_end: int = 0  # offset just past the last valid line
    last_line_at: int = -1  # offset of the last line seen
    open_tail: bool | None = None  # a final unterminated segment: whether it is a record


def _scan(
    lines: Iterator[Line],
    parse: Callable[[bytes], Parsed[object] | None],
    open_parse: Callable[[bytes], Parsed[object] | None] | None = None,
) -> _Scan:
    """Forward pass: keep single lines and complete batches, skip the rest.

    ``open_parse`` (default ``parse``) judges a final unterminated segment: the writer checks
    every other line cheaply but decodes a torn tail fully.
    """
    out = _Scan()
    pending: list[tuple[int, int, int | None, object, int]] = []
    entries = out.entries
    for offset, line, terminated in lines:
        out.last_line_at = offset
        if terminated:
            parsed = parse(line)
        else:
            parsed = (open_parse or parse)(line)
            out.open_tail = parsed is not None
        end = offset + len(line) + 1
        if parsed is not None:
            seq, to, payload = parsed
            if seq > out.max_seq:
                out.max_seq = seq
            if to is not None and to > out.max_seq:
                out.max_seq = to
            if pending:
                _, p_seq, p_to, _, _ = pending[-1]
                if _continues(p_seq, p_to, seq, to):  # type: ignore[arg-type]
                    pending.append((offset, seq, to, payload, end))
                    if to is None:
                        entries.extend((o, s, p) for o, s, _, p, _ in pending)
                        out.last_valid_end = end
                        pending.clear()
                    continue
                out.skipped.extend(p[0] for p in pending)
                pending.clear()
            if to is None:
                entries.append((offset, seq, payload))
                out.last_valid_end = end
            elif to > seq:
                pending.append((offset, seq, to, payload, end))
            else:
                out.skipped.append(offset)
        else:
            if pending:
                out.skipped.extend(p[0] for p in pending)
                pending.clear()
            if line:
                out.skipped.append(offset)
    out.skipped.extend(p[0] for p in pending)  # a batch cut short at the end of the file
    return out


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


def _writer_active(lock_path: str) -> bool:
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


def _report(path: str, lock_path: str, skipped: Sequence[int], tail_start: int) -> None:
    """Warn about skipped lines; those after the last valid one may be a write in progress."""
    if not skipped:
        return
    tail = [o for o in skipped if o >= tail_start]
    if tail and _writer_active(lock_path):
        skipped = [o for o in skipped if o < tail_start]
    _warn_skipped(path, skipped)


# --- reads ------------------------------------------------------------------------------------

_O_READ: Final = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
_O_APPEND: Final = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
_O_LOCK: Final = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
_FIRST_CHUNK: Final = 16384
_MAX_DIRTY: Final = 4096
# Reads up to this size (or tail reads of up to _INLINE_LIMIT messages) run on the event loop:
# below it a thread hop (~60-95 µs) would cost more than the read; above it the loop would
# block for milliseconds while a hop adds a few percent.
INLINE_BYTES: Final = 128 * 1024
INLINE_LIMIT: Final = 256


Entry = tuple[int, int | None, ChatMessage]  # (seq, to, message) of a valid line


class _LineCache:
    """Decoded lines keyed by their exact bytes, per file; least recently read files leave first.

    A line's bytes determine its message (the codec is deterministic, messages are immutable),
    so an entry can never be stale, whatever another process does to the file: a rewritten or
    recreated file simply stops matching. Parsing and building messages is most of a read's
    cost; a warm read only splits lines and looks them up. One file may fill at most half of
    the budget (its newest lines win).
    """

    __slots__ = ("_files", "_lock", "_size", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._files: OrderedDict[str, tuple[dict[bytes, Entry], list[int]]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()  # full reads of big files run on worker threads

    def lines(self, path: str) -> dict[bytes, Entry] | None:
        with self._lock:
            got = self._files.get(path)
            if got is None:
                return None
            self._files.move_to_end(path)
            return got[0]

    def add(self, path: str, newest_first: list[tuple[bytes, Entry]]) -> None:
        if not self.max_bytes or not newest_first:
            return
        room = self.max_bytes // 2
        with self._lock:
            got = self._files.get(path)
            if got is None:
                got = self._files[path] = ({}, [0])
            else:
                self._files.move_to_end(path)
            lines, size = got
            if size[0] + sum(len(line) for line, _ in newest_first) > room:
                self._size -= size[0]  # the file outgrew its share: keep its newest lines
                lines.clear()
                size[0] = 0
            for line, entry in newest_first:
                if size[0] + len(line) > room:
                    break
                if line not in lines:
                    lines[line] = entry
                    size[0] += len(line)
                    self._size += len(line)
            while self._size > self.max_bytes and len(self._files) > 1:
                _, (_, old) = self._files.popitem(last=False)
                self._size -= old[0]

    def drop(self, prefix: str) -> None:
        """Forget every file equal to or under ``prefix`` (erased data leaves memory too)."""
        with self._lock:
            for path in [p for p in self._files if p == prefix or p.startswith(prefix + os.sep)]:
                self._size -= self._files.pop(path)[1][0]

    def clear(self) -> None:
        with self._lock:
            self._files.clear()
            self._size = 0


def _decode_entry(line: bytes) -> Entry | None:
    head = _head(line)
    if head is None:
        return None
    try:
        # json.loads on str skips its encoding sniffing: a third faster than on bytes.
        return head[0], head[1], decode(line.decode("utf-8"))
    except (CorruptRecordError, UnicodeDecodeError):
        return None


def _load_messages(path: str, lock_path: str, cache: _LineCache) -> list[tuple[int, ChatMessage]]:
    """Every valid ``(seq, message)`` of a file in file order (``[]`` when it is missing)."""
    try:
        fd = os.open(path, _O_READ)
    except FileNotFoundError:
        return []
    known = cache.lines(path) or {}
    new: list[tuple[bytes, Entry]] = []

    def parse(line: bytes) -> Entry | None:
        entry = known.get(line)
        if entry is None:
            entry = _decode_entry(line)
            if entry is not None:
                new.append((line, entry))
        return entry

    try:
        scan = _scan(_lines(fd, 0, os.fstat(fd).st_size), parse)
    finally:
        os.close(fd)
    new.reverse()
    cache.add(path, new)
    _report(path, lock_path, scan.skipped, scan.last_valid_end)
    return [(seq, payload) for _, seq, payload in scan.entries]  # type: ignore[misc]


def _tail_messages(path: str, lock_path: str, limit: int, cache: _LineCache) -> list[ChatMessage]:
    """The newest ``limit`` valid messages, oldest first, reading backwards from the end.

    Reads about ``limit`` lines whatever the file's length. A line counts only when it decodes
    and, if it belongs to a batch, every later line of that batch is there (``to``).
    """
    try:
        fd = os.open(path, _O_READ)
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
                    entry = _decode_entry(line)
                    if entry is None:
                        skipped.append(offset)
                        next_ok = False
                        continue
                    new.append((line, entry))
                seq, to, message = entry
                ok = to is None or (
                    next_ok and to > seq and _continues(seq, to, next_seq, next_to)
                )
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
    start_at = 0
    while start_at < len(out) and out[start_at].role == "tool":
        start_at += 1
    return out[start_at:] if start_at else out


# --- the writer's cache of a key's ids ----------------------------------------------------------

class _WouldBlock(Exception):
    """An inline append stopped before writing anything: retry it on a worker thread."""


@attrs.define(slots=True)
class _KeyState:
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
    ids: set[str] = attrs.Factory(set)
    max_seq: int = 0
    terminator: bytes = b""  # what the next write must start with (a torn tail's end)
    sidecar_ok: bool = False
    synced_at: float = 0.0  # monotonic time of the last fsync ("batch")
    dir_unsynced: bool = False  # the file is new: fsync its directory with it


# --- the store --------------------------------------------------------------------------------

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


class JsonlChatStorage(AsyncContextMixin):
    """Conversations as append-only JSON-lines files under ``path`` (see the module docstring).

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
        self._cache = _LineCache(cache_bytes)
        self._states: OrderedDict[str, _KeyState] = OrderedDict()
        self._dirty: set[str] = set()  # files written since their last fsync ("batch")
        self._mutex = threading.Lock()  # guards the two above (worker threads use them)
        self._locks: dict[str, tuple[anyio.Lock, list[int]]] = {}
        self._closed = False

    # -- helpers -------------------------------------------------------------------------------

    def _paths(self, key: ChatKey) -> _Paths:
        return _key_paths(self.root, key.user_id, key.session_id, key.agent_id)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailableError(f"JSONL store {self.root!r} is closed")

    def _unavailable(self, what: str, exc: OSError) -> StorageUnavailableError:
        return StorageUnavailableError(f"JSONL store {self.root!r}: cannot {what}: {exc}")

    @asynccontextmanager
    async def _guard(self, session_dir: str) -> AsyncIterator[None]:
        """The in-process lock of a session (dropped when nobody waits on it)."""
        entry = self._locks.get(session_dir)
        if entry is None:
            entry = self._locks[session_dir] = (anyio.Lock(), [0])
        entry[1][0] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1][0] -= 1
            if not entry[1][0]:
                del self._locks[session_dir]

    def _mkdirs(self, paths: _Paths) -> list[str]:
        """Create the user and session directories (0700); return the ones made."""
        made = []
        for directory in (paths.user_dir, paths.session_dir):
            try:
                os.mkdir(directory, 0o700)
                made.append(directory)
            except FileExistsError:
                pass
        return made

    @contextmanager
    def _flock(
        self, paths: _Paths, *, make_dirs: bool = True, blocking: bool = True
    ) -> Iterator[int | None]:
        """Hold the session's flock; yield the lock file's descriptor.

        The lock file is created when missing; its directories only with ``make_dirs``
        (otherwise ``None`` is yielded: there is no session). A deleter unlinks the lock file
        while holding it, so after acquiring, the descriptor must still be the file at the
        path; otherwise the lock is stale and we retry on the new one.

        Raises:
            _WouldBlock: not ``blocking`` and another task or process holds the lock.
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
                    made += self._mkdirs(paths)
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise _WouldBlock from None
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
                if made and self.fsync == "always":
                    for directory in made:
                        _fsync_dir(os.path.dirname(directory))
                yield fd
            finally:
                os.close(fd)  # releases the flock
            return
        raise StorageUnavailableError(f"cannot lock {paths.lock!r}: it keeps being replaced")

    def _remember(self, path: str, state: _KeyState) -> None:
        with self._mutex:
            self._states[path] = state
            self._states.move_to_end(path)
            while len(self._states) > self.max_cached_keys:
                self._states.popitem(last=False)

    def _forget(self, prefix: str, *, lines: bool = False) -> None:
        """Drop cached state of every file under ``prefix`` (a file or a directory), and with
        ``lines`` their decoded lines too (erased data leaves memory)."""
        with self._mutex:
            for path in [p for p in self._states if p == prefix or p.startswith(prefix + os.sep)]:
                del self._states[path]
        if lines:
            self._cache.drop(prefix)

    # -- the writer ----------------------------------------------------------------------------

    def _sync_state(
        self, path: str, fd: int, st: os.stat_result, max_scan: int | None
    ) -> _KeyState:
        """The file's state, rescanned or extended to its current end (under the flock).

        Raises:
            _WouldBlock: more than ``max_scan`` bytes would have to be scanned.
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
            raise _WouldBlock
        if state is None:
            # The fsync clock of "batch" starts now; a new file's directory entry is unsynced.
            state = _KeyState(st.st_dev, st.st_ino, synced_at=time.monotonic())
            state.dir_unsynced = st.st_size == 0
        if st.st_size > state.size:
            scan = _scan(_lines(fd, state.size, st.st_size), _parse_id, _parse_torn_id)
            state.ids.update(payload for _, _, payload in scan.entries)  # type: ignore[misc]
            if scan.max_seq > state.max_seq:
                state.max_seq = scan.max_seq
            if scan.last_line_at >= 0:
                state.head_at = scan.last_line_at
                state.head = os.pread(fd, 48, scan.last_line_at)
            state.size = st.st_size
            # A torn tail is ended by the next write: a plain newline keeps a whole record
            # that only lacked it; anything else gets a mark that no parser accepts.
            if scan.open_tail is None:
                state.terminator = b""
            else:
                state.terminator = b"\n" if scan.open_tail else _TORN_MARK
        return state

    def _append_sync(
        self, paths: _Paths, key: ChatKey, batch: list[ChatMessage], inline: bool = False
    ) -> list[ChatMessage]:
        """Append under the flock. ``inline`` (on the event loop): raise ``_WouldBlock``,
        having written nothing, wherever the work could block (the caller then hops)."""
        try:
            with self._flock(paths, blocking=not inline) as lock_fd:
                assert lock_fd is not None
                fd = os.open(paths.data, _O_APPEND, 0o600)
                try:
                    return self._append_locked(paths, key, batch, lock_fd, fd, inline)
                except _WouldBlock:
                    raise
                except BaseException:
                    self._forget(paths.data)
                    raise
                finally:
                    os.close(fd)
        except OSError as exc:
            raise self._unavailable(f"append to {paths.data!r}", exc) from exc

    def _append_locked(
        self,
        paths: _Paths,
        key: ChatKey,
        batch: list[ChatMessage],
        lock_fd: int,
        fd: int,
        inline: bool,
    ) -> list[ChatMessage]:
        st = os.fstat(fd)
        state = self._sync_state(paths.data, fd, st, INLINE_BYTES if inline else None)
        self._remember(paths.data, state)
        new = [m for m in batch if m.id not in state.ids]
        if not new:
            return []
        if paths.sidecar is not None and not state.sidecar_ok:
            if inline:
                raise _WouldBlock  # writing it fsyncs
            expected = [key.user_id, key.session_id, key.agent_id]
            if _read_sidecar(paths.sidecar) != expected:
                _write_sidecar(paths.sidecar, key)
            state.sidecar_ok = True
        now = time.monotonic()
        due = self.fsync == "always" or (
            self.fsync == "batch" and now - state.synced_at >= self.fsync_interval
        )
        if inline and (due or len(self._dirty) >= _MAX_DIRTY):
            raise _WouldBlock
        first = max(_read_counter(lock_fd), state.max_seq) + 1
        last = first + len(new) - 1
        lines = []
        for n, message in enumerate(new):
            record = encode(message)[1:].encode("utf-8")
            seq = first + n
            if seq < last:
                lines.append(b'{"seq":%d,"to":%d,%b\n' % (seq, last, record))
            else:
                lines.append(b'{"seq":%d,%b\n' % (seq, record))
        payload = state.terminator + b"".join(lines)
        if inline and len(payload) > INLINE_BYTES:
            raise _WouldBlock
        # Reserve the seqs first: a crash after this leaves a gap, never a reused seq.
        os.pwrite(lock_fd, b"%020d\n" % last, 0)
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
        state.ids.update(m.id for m in new)
        state.max_seq = last
        state.terminator = b""
        return new

    def _after_write(
        self, paths: _Paths, fd: int, state: _KeyState, due: bool, now: float
    ) -> None:
        """Apply the fsync policy to a file just appended to (``due``: fsync it now)."""
        if due:
            os.fsync(fd)
            if state.dir_unsynced:
                _fsync_dir(paths.session_dir)
                state.dir_unsynced = False
            state.synced_at = now
            if self.fsync == "batch":
                with self._mutex:
                    self._dirty.discard(paths.data)
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
            _fsync_paths(backlog)

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
        async with self._guard(paths.session_dir):
            if self.fsync != "always" and len(batch) <= INLINE_LIMIT:
                # Uncontended small appends are a few syscalls: cheaper than a thread hop.
                try:
                    return self._append_sync(paths, key, batch, inline=True)
                except _WouldBlock:
                    pass
            return await anyio.to_thread.run_sync(self._append_sync, paths, key, batch)

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
                    return _tail_messages(paths.data, paths.lock, limit, self._cache)
                size = _size(paths.data)
                if size is None:
                    return []
                if size <= INLINE_BYTES:
                    return _tail_messages(paths.data, paths.lock, limit, self._cache)
                return await anyio.to_thread.run_sync(
                    _tail_messages, paths.data, paths.lock, limit, self._cache
                )
            size = _size(paths.data)
            if size is None:
                return []
            if size <= INLINE_BYTES:
                rows = _load_messages(paths.data, paths.lock, self._cache)
            else:
                rows = await anyio.to_thread.run_sync(
                    _load_messages, paths.data, paths.lock, self._cache
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
            files = _session_files(session_dir)
            if sum(size for _, _, size in files) <= INLINE_BYTES:
                return _merge_session(session_dir, files, self._cache)
            return await anyio.to_thread.run_sync(_merge_session, session_dir, files, self._cache)
        except OSError as exc:
            raise self._unavailable(f"read session {session_dir!r}", exc) from exc

    async def delete(self, key: ChatKey) -> None:
        """Erase one conversation: its file, and its session and user directories once empty.

        Raises:
            StorageUnavailableError: the files cannot be removed.
        """
        self._check_open()
        paths = self._paths(key)
        async with self._guard(paths.session_dir):
            try:
                await anyio.to_thread.run_sync(self._delete_sync, paths)
            except OSError as exc:
                raise self._unavailable(f"delete {paths.data!r}", exc) from exc

    def _delete_sync(self, paths: _Paths) -> None:
        with self._flock(paths, make_dirs=False) as lock_fd:
            for path in (paths.data, paths.sidecar, _tmp_path(paths.data)):
                if path is not None:
                    _unlink(path)
            self._forget(paths.data, lines=True)
            if not any(n.endswith(DATA_SUFFIX) for n in _listdir(paths.session_dir)):
                # Writers create data files only under the flock, so none can appear now.
                _remove_session(paths.session_dir, held_lock=lock_fd is not None)
        _rmdir_if_empty(paths.user_dir)

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
        for session in _listdir(user_dir):
            session_dir = os.path.join(user_dir, session)
            if not os.path.isdir(session_dir):
                _unlink(session_dir)
                continue
            paths = _Paths(user_dir, session_dir, os.path.join(session_dir, LOCK_NAME), "", None)
            with self._flock(paths, make_dirs=False) as lock_fd:
                _remove_session(session_dir, held_lock=lock_fd is not None)
        self._forget(user_dir, lines=True)
        _rmdir_if_empty(user_dir)

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
            with self._mutex:
                self._states.clear()
            self._cache.clear()

    async def _flush(self) -> None:
        with self._mutex:
            dirty = list(self._dirty)
            self._dirty.clear()
        if dirty:
            try:
                await anyio.to_thread.run_sync(_fsync_paths, dirty)
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
        async with self._guard(paths.session_dir):
            try:
                return await anyio.to_thread.run_sync(
                    self._compact_session_sync, paths, [paths.data]
                )
            except OSError as exc:
                raise self._unavailable(f"compact {paths.data!r}", exc) from exc
            finally:
                self._forget(paths.data)

    async def compact_all(self) -> list[CompactResult]:
        """:meth:`compact` every file under the root, one session at a time.

        Raises:
            StorageUnavailableError: a file cannot be read or replaced.
        """
        self._check_open()
        results: list[CompactResult] = []
        try:
            sessions = await anyio.to_thread.run_sync(_all_sessions, self.root)
        except OSError as exc:
            raise self._unavailable("list the store", exc) from exc
        for user_dir, session_dir, files in sessions:
            paths = _Paths(user_dir, session_dir, os.path.join(session_dir, LOCK_NAME), "", None)
            async with self._guard(session_dir):
                try:
                    done = await anyio.to_thread.run_sync(
                        self._compact_files_sync, paths, files
                    )
                except OSError as exc:
                    raise self._unavailable(f"compact {session_dir!r}", exc) from exc
                finally:
                    self._forget(session_dir)
            results.extend(done)
        return results

    def _compact_session_sync(self, paths: _Paths, files: list[str]) -> CompactResult | None:
        done = self._compact_files_sync(paths, files)
        return done[0] if done else None

    def _compact_files_sync(self, paths: _Paths, files: list[str]) -> list[CompactResult]:
        results = []
        with self._flock(paths, make_dirs=False) as lock_fd:
            if lock_fd is None:
                return []
            for path in files:
                _unlink(_tmp_path(path))  # left by a compaction that crashed
                done = _compact_file(path)
                if done is not None:
                    results.append(done)
                    with self._mutex:
                        self._dirty.discard(path)
        return results

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """Every key with a non-empty file, sorted (``storage.listing.ListableStorage``).

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
            keys = await anyio.to_thread.run_sync(_all_keys, self.root, user_id, session_id)
        except OSError as exc:
            raise self._unavailable("list the store", exc) from exc
        keys.sort(key=lambda k: (k.user_id, k.session_id, k.agent_id))
        return keys

    def describe(self) -> str:
        return f"jsonl:///{self.root} (fsync={self.fsync})"  # root is absolute: jsonl:////abs


# --- file helpers -------------------------------------------------------------------------------

def _parse_torn_id(line: bytes) -> Parsed[object] | None:
    """A torn tail counts only if it decodes fully (it lacks just its newline)."""
    parsed = _decode_entry(line)
    return None if parsed is None else (parsed[0], parsed[1], parsed[2].id)


def _read_counter(lock_fd: int) -> int:
    raw = os.pread(lock_fd, 32, 0)
    try:
        return int(raw)
    except ValueError:
        # A new session: start from the clock in µs, so a session deleted and recreated never
        # reuses a seq (writers recognise their cached file by its last line, seq included).
        return time.time_ns() // 1000


def _truncate(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:  # pragma: no cover - the original error is what matters
        log.exception("cannot undo a failed append")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_paths(paths: list[str]) -> None:
    for path in paths:
        try:
            fd = os.open(path, _O_READ)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _unlink(path: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)


def _rmdir_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
            raise


def _remove_session(session_dir: str, *, held_lock: bool) -> None:
    """Remove every file of a session directory, its lock file last, and the directory.

    The lock file is removed only by the holder of its flock: a waiter on it then sees the
    file gone and retries on a new one. Without it, the directory stays if a lock appeared.
    """
    for name in _listdir(session_dir):
        if name != LOCK_NAME:
            _unlink(os.path.join(session_dir, name))
    if held_lock:
        _unlink(os.path.join(session_dir, LOCK_NAME))
    _rmdir_if_empty(session_dir)


def _tmp_path(data_path: str) -> str:
    head, name = os.path.split(data_path)
    return os.path.join(head, f".{name}{_TMP_SUFFIX}")


def _write_sidecar(path: str, key: ChatKey) -> None:
    """Write the full key next to a file whose name was hashed (atomically: temp + rename)."""
    tmp = _tmp_path(path)
    body = json.dumps([key.user_id, key.session_id, key.agent_id]).encode("ascii") + b"\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_sidecar(path: str) -> list[str] | None:
    try:
        with open(path, "rb") as f:
            parts = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if isinstance(parts, list) and len(parts) == 3 and all(isinstance(p, str) and p for p in parts):
        return parts
    return None


def _agent_of(session_dir: str, name: str) -> str | None:
    """The agent id a data file's name stands for (its sidecar when the name is hashed)."""
    stem = name[: -len(DATA_SUFFIX)]
    agent = decode_name(stem)
    if agent is None:
        parts = _read_sidecar(os.path.join(session_dir, stem + KEY_SUFFIX))
        if parts is not None and encode_name(parts[2]) == stem:
            agent = parts[2]
    return agent


def _session_files(session_dir: str) -> list[tuple[str, str, int]]:
    """``(agent name, path, size)`` of every data file of a session directory."""
    out = []
    try:
        entries = list(os.scandir(session_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        name = entry.name
        if name.endswith(DATA_SUFFIX) and not name.startswith("."):
            try:
                out.append((name, entry.path, entry.stat(follow_symlinks=False).st_size))
            except FileNotFoundError:
                continue
    out.sort()
    return out


def _merge_session(
    session_dir: str, files: list[tuple[str, str, int]], cache: _LineCache
) -> list[AgentMessage]:
    lock_path = os.path.join(session_dir, LOCK_NAME)
    rows: list[tuple[datetime, int, int, int, str, ChatMessage]] = []
    for file_no, (name, path, size) in enumerate(files):
        if not size:
            continue
        agent = _agent_of(session_dir, name)
        if agent is None:
            log.warning("%s: skipped a file whose name is not a key this store wrote", path)
            continue
        for line_no, (seq, message) in enumerate(_load_messages(path, lock_path, cache)):
            assert message.created_at is not None
            rows.append((message.created_at, seq, file_no, line_no, agent, message))
    rows.sort(key=lambda row: row[:4])
    return [AgentMessage(agent, message) for *_, agent, message in rows]


def _all_sessions(
    root: str, user: str | None = None, session: str | None = None, *, nonempty: bool = False
) -> list[tuple[str, str, list[str]]]:
    """``(user dir, session dir, data files)`` of every session (of one user or session)."""
    out = []
    users = [encode_name(user)] if user is not None else sorted(_listdir(root))
    for user_name in users:
        user_dir = os.path.join(root, user_name)
        if user_name.startswith(".") or not os.path.isdir(user_dir):
            continue
        sessions = [encode_name(session)] if session is not None else sorted(_listdir(user_dir))
        for session_name in sessions:
            session_dir = os.path.join(user_dir, session_name)
            files = [
                path for _, path, size in _session_files(session_dir) if size or not nonempty
            ]
            if files:
                out.append((user_dir, session_dir, files))
    return out


def _all_keys(root: str, user_id: str | None, session_id: str | None) -> list[ChatKey]:
    keys = []
    for _, session_dir, files in _all_sessions(root, user_id, session_id, nonempty=True):
        user_name = os.path.basename(os.path.dirname(session_dir))
        session_name = os.path.basename(session_dir)
        for path in files:
            stem = os.path.basename(path)[: -len(DATA_SUFFIX)]
            parts = [decode_name(user_name), decode_name(session_name), decode_name(stem)]
            if None in parts:
                sidecar = _read_sidecar(os.path.join(session_dir, stem + KEY_SUFFIX))
                if sidecar is None:
                    log.warning("%s: skipped a file whose key cannot be recovered", path)
                    continue
                parts = list(sidecar)
            keys.append(ChatKey(*parts))  # type: ignore[arg-type]
    return keys


def _memory_lines(data: bytes) -> Iterator[Line]:
    pos = 0
    while (end := data.find(b"\n", pos)) >= 0:
        yield pos, data[pos:end], True
        pos = end + 1
    if pos < len(data):
        yield pos, data[pos:], False


def _compact_file(path: str) -> CompactResult | None:
    """Rewrite ``path`` with only its valid lines (the caller holds the session's flock)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    # Keep exactly the lines a reader keeps, whole batches only, so reads are unchanged.
    scan = _scan(_memory_lines(data), _decode_entry)
    kept: list[bytes] = []
    for offset, _, _ in scan.entries:
        end = data.find(b"\n", offset)
        kept.append(data[offset : end if end >= 0 else len(data)] + b"\n")
    body = b"".join(kept)
    dropped = len(scan.skipped)
    if body == data:
        return CompactResult(path, len(kept), 0, len(data), len(data))
    tmp = _tmp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))
    return CompactResult(path, len(kept), dropped, len(data), len(body))
