"""Per-session summaries for ``list_sessions`` and retention: a cache, never the truth.

Each session directory may hold ``.summary``: for each data file, what a scan of it found up
to some offset (message count, oldest and newest ``created_at``) and the file's identity
there (device, inode, the bytes just before that offset)::

    {"v":1,"files":{"a.jsonl":[dev,ino,size,end,"<hex: bytes before end>",count,min_us,max_us]},
     "active":1718000000000000}

Writers never touch it, so saves cost nothing more. A reader checks each entry against the
file (its ``stat``: an append-only file of unchanged inode and size is unchanged; else one
``pread`` of the bytes before ``end``) and scans only the bytes appended since (lines are parsed
cheaply, heads and times only, never decoded into messages); any mismatch (a rewrite, a
deletion, a truncation) rescans that file. Listing a user's sessions therefore costs a
directory walk of the user's sessions, a ``stat`` and a small read per conversation, and a
scan of what was appended since the last listing. The summary is written back atomically
(temporary file, rename) under the session's flock, taken without waiting.

``active`` is the one thing the files cannot tell: the session's last activity, the order of
``list_sessions``, kept when a conversation of the session is deleted or rewritten
(``replace``, a purge) so that removing messages never lowers it (a session never moves
behind a listing cursor that passed it). Whoever removes messages records it under the
session's flock (:func:`activity_before`, :func:`keep_activity`); it is forgotten when the
session holds no message. A summary that is lost or unreadable only costs a rescan (and the
order falls back to the newest message).
"""

from __future__ import annotations

import json
import os
from typing import Final

import attrs

from storage.abilities import SessionInfo
from storage.stores.base.sessions import walk_position
from storage.stores.jsonl.fsutil import O_READ, listdir, write_atomic
from storage.stores.jsonl.lines import parse_time, read_lines, scan
from storage.stores.jsonl.locks import WouldBlock, flock
from storage.stores.jsonl.names import SUMMARY_NAME, Paths, encode_name, session_paths
from storage.stores.jsonl.tree import agent_of, data_files, session_of
from storage.stores.times import from_us

_FORMAT: Final = 1
_CHECK: Final = 32  # bytes before ``end`` that must be unchanged for an entry to stand


@attrs.frozen(slots=True)
class FileSummary:
    """What a scan of one data file found up to ``end`` (``count`` 0: no message), when the
    file had ``size`` bytes."""

    dev: int
    ino: int
    size: int
    end: int
    check: bytes
    count: int
    min_us: int
    max_us: int

    def row(self) -> list[object]:
        return [
            self.dev,
            self.ino,
            self.size,
            self.end,
            self.check.hex(),
            self.count,
            self.min_us,
            self.max_us,
        ]

    @classmethod
    def from_row(cls, row: object) -> FileSummary | None:
        if not isinstance(row, list) or len(row) != 8:
            return None
        dev, ino, size, end, check, count, lo, hi = row
        if not all(type(v) is int for v in (dev, ino, size, end, count, lo, hi)):
            return None
        if not isinstance(check, str):
            return None
        try:
            return cls(dev, ino, size, end, bytes.fromhex(check), count, lo, hi)
        except ValueError:
            return None


@attrs.frozen(slots=True)
class SessionSummary:
    """A session's file summaries and its recorded last activity (µs; 0: none recorded)."""

    files: dict[str, FileSummary] = attrs.Factory(dict)
    active: int = 0

    @property
    def count(self) -> int:
        """Messages in the session's files."""
        return sum(entry.count for entry in self.files.values())

    @property
    def last_us(self) -> int:
        """The session's last activity: the recorded one or its newest message's time."""
        newest = max((e.max_us for e in self.files.values() if e.count), default=0)
        return max(newest, self.active)


def read_summary(session_dir: str) -> SessionSummary:
    """The cached summary of a session (empty when missing or unreadable: a rescan)."""
    try:
        with open(os.path.join(session_dir, SUMMARY_NAME), "rb") as f:
            raw = json.loads(f.read())
        if raw.get("v") != _FORMAT or not isinstance(raw.get("files"), dict):
            return SessionSummary()
    except (OSError, ValueError, AttributeError, RecursionError):
        return SessionSummary()
    out = {}
    for name, row in raw["files"].items():
        entry = FileSummary.from_row(row)
        if entry is not None and isinstance(name, str):
            out[name] = entry
    active = raw.get("active")
    return SessionSummary(out, active if type(active) is int and active > 0 else 0)


def summarize_file(
    path: str, previous: FileSummary | None, listed: tuple[int, int, int] | None = None
) -> FileSummary | None:
    """The summary of a data file, extended from ``previous`` when it still stands
    (``None`` when the file is missing). ``listed`` is the file's ``(dev, ino, size)`` from
    the directory listing: when it matches ``previous`` the file is not opened.

    Raises:
        OSError: the file exists but cannot be read.
    """
    if previous is not None and listed == (previous.dev, previous.ino, previous.size):
        return previous  # files are only appended to or replaced by rename
    try:
        fd = os.open(path, O_READ)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        base = previous
        if base is not None and (
            (base.dev, base.ino) != (st.st_dev, st.st_ino)
            or st.st_size < base.end
            or os.pread(fd, len(base.check), base.end - len(base.check)) != base.check
        ):
            base = None
        if base is not None and base.size == st.st_size:
            return base
        start = base.end if base is not None else 0
        found = scan(read_lines(fd, start, st.st_size), parse_time)
        count = base.count if base is not None else 0
        lo = base.min_us if base is not None else 0
        hi = base.max_us if base is not None else 0
        for _, _, at in found.entries:
            if not isinstance(at, int):
                continue  # a record
            if not count:
                lo = hi = at
            else:
                lo, hi = min(lo, at), max(hi, at)
            count += 1
        end = max(found.last_valid_end, start)
        take = min(_CHECK, end)
        check = os.pread(fd, take, end - take) if take else b""
        return FileSummary(st.st_dev, st.st_ino, st.st_size, end, check, count, lo, hi)
    finally:
        os.close(fd)


def summarize_session(session_dir: str) -> tuple[SessionSummary, bool]:
    """The summary of every data file of a session (and its recorded activity) and whether
    it differs from the cached one.

    Raises:
        OSError: a file exists but cannot be read.
    """
    cached = read_summary(session_dir)
    out: dict[str, FileSummary] = {}
    for name, path, st in data_files(session_dir):
        entry = summarize_file(path, cached.files.get(name), (st.st_dev, st.st_ino, st.st_size))
        if entry is not None:
            out[name] = entry
    return SessionSummary(out, cached.active), out != cached.files


def activity_before(session_dir: str, name: str) -> int:
    """The session's last activity before its data file ``name`` loses messages (under the
    session's flock): the recorded one or that file's newest message, whichever is later.

    Raises:
        OSError: the file exists but cannot be read.
    """
    cached = read_summary(session_dir)
    entry = summarize_file(os.path.join(session_dir, name), cached.files.get(name))
    newest = entry.max_us if entry is not None and entry.count else 0
    return max(cached.active, newest)


def keep_activity(session_dir: str, active: int) -> None:
    """After a conversation of the session lost messages (under the session's flock): record
    ``active`` as its last activity, or forget it when the session holds no message.

    Raises:
        OSError: a file exists but cannot be read, or the summary cannot be written.
    """
    summary, _ = summarize_session(session_dir)
    newest = max((e.max_us for e in summary.files.values() if e.count), default=0)
    needed = active if summary.count and active > newest else 0
    if not needed and not os.path.exists(os.path.join(session_dir, SUMMARY_NAME)):
        return  # the files tell it all: no summary needed
    _write(session_dir, SessionSummary(summary.files, needed))


def store_summary(paths: Paths, summary: SessionSummary) -> None:
    """Write the session's summary back if its flock is free (a cache: skipped otherwise),
    keeping only entries whose file is still the one summarized.

    Raises:
        OSError: the summary cannot be written.
    """
    try:
        with flock(paths, make_dirs=False, blocking=False) as lock_fd:
            if lock_fd is None:
                return  # the session was deleted
            # The activity recorded now, not the one read before the flock: a deleter may
            # have recorded a later one since.
            _write(
                paths.session_dir,
                SessionSummary(summary.files, read_summary(paths.session_dir).active),
            )
    except WouldBlock:
        return


def _write(session_dir: str, summary: SessionSummary) -> None:
    """Write the summary (the caller holds the session's flock)."""
    rows = {}
    for name, entry in summary.files.items():
        try:
            st = os.stat(os.path.join(session_dir, name), follow_symlinks=False)
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) == (entry.dev, entry.ino) and st.st_size >= entry.end:
            rows[name] = entry.row()
    body: dict[str, object] = {"v": _FORMAT, "files": rows}
    if summary.active:
        body["active"] = summary.active
    text = json.dumps(body, separators=(",", ":"))
    write_atomic(os.path.join(session_dir, SUMMARY_NAME), text.encode("ascii"), sync=False)


def user_sessions(
    root: str, user_id: str, bound: int | None = None
) -> tuple[list[SessionInfo], dict[str, int]]:
    """Every session of ``user_id`` holding a message (any order), from the session
    summaries, brought up to date and written back on the way; and the walk positions of
    the sessions whose last activity is past ``bound`` (:func:`walk_times`).

    Raises:
        OSError: a file exists but cannot be read.
    """
    out = []
    positions: dict[str, int] = {}
    user_dir = os.path.join(root, encode_name(user_id))
    for name in listdir(user_dir):
        session_dir = os.path.join(user_dir, name)
        summary, changed = summarize_session(session_dir)
        if changed:
            store_summary(session_paths(user_dir, session_dir), summary)
        agents, count, lo, hi = [], 0, 0, 0
        for file_name, entry in summary.files.items():
            if not entry.count:
                continue
            agent = agent_of(session_dir, file_name)
            if agent is None:
                continue
            agents.append(agent)
            lo = entry.min_us if not count else min(lo, entry.min_us)
            hi = entry.max_us if not count else max(hi, entry.max_us)
            count += entry.count
        session_id = session_of(session_dir, list(summary.files)) if count else None
        if session_id is not None:
            agents.sort()
            # The last activity: deleting a conversation of the session does not lower it.
            hi = max(hi, summary.active)
            out.append(SessionInfo(session_id, tuple(agents), count, from_us(lo), from_us(hi)))
            if bound is not None and hi > bound:
                times = walk_times(session_dir, summary)
                positions[session_id] = walk_position(times, bound, lo)
    return out, positions


def walk_times(session_dir: str, summary: SessionSummary) -> list[int]:
    """Every message time of a session's data files and its recorded activity (µs): where a
    session saved to during a listing walk stood when the walk began.

    Raises:
        OSError: a file exists but cannot be read.
    """
    times = [summary.active] if summary.active else []
    for name in summary.files:
        try:
            fd = os.open(os.path.join(session_dir, name), O_READ)
        except FileNotFoundError:
            continue
        try:
            found = scan(read_lines(fd, 0, os.fstat(fd).st_size), parse_time)
        finally:
            os.close(fd)
        times += [at for _, _, at in found.entries if isinstance(at, int)]
    return times
