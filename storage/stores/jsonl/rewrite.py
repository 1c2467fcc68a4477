"""Rewriting a key's file whole, under the session's flock: ``replace``, retention purges,
and removing a key's files.

A rewrite writes a new file with a fresh header (a new epoch: the key's messages changed
other than by appending), fsyncs it, renames it over the old one and fsyncs the directory;
the key's checkpoint is removed after the rename (a crash between leaves a checkpoint of the
old epoch, which is void). Readers see the old file or the new one. Lines kept are copied
byte for byte without their batch marks (the rename makes the new file atomic as a whole).
Whatever removes messages keeps the session's last activity (``sessions.keep_activity``), and
a purge removes tool groups whole (:func:`storage.history.whole_tool_groups`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from storage.history import whole_tool_groups
from storage.message import ChatMessage
from storage.stores.jsonl.fsutil import fsync_dir, listdir, unlink, write_atomic
from storage.stores.jsonl.lines import (
    Item,
    Scan,
    decode_entry,
    format_batch,
    format_header,
    memory_lines,
    single_line,
    to_us,
)
from storage.stores.jsonl.lines import scan as scan_lines
from storage.stores.jsonl.locks import read_counter, reserve
from storage.stores.jsonl.names import Paths, is_key_file
from storage.stores.jsonl.sessions import activity_before, keep_activity
from storage.stores.jsonl.tree import remove_session
from storage.stores.jsonl.writer import new_epoch


def read_whole(path: str) -> tuple[bytes, Scan]:
    """A file's bytes and its valid lines (``(b"", empty scan)`` when missing).

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return b"", Scan()
    return data, scan_lines(memory_lines(data), decode_entry)


def _line(data: bytes, offset: int) -> bytes:
    end = data.find(b"\n", offset)
    return data[offset : end if end >= 0 else len(data)]


def kept_lines(data: bytes, found: Scan, keep: Callable[[Item], bool]) -> tuple[list[bytes], int]:
    """The lines (with newlines, batch marks dropped) of the entries ``keep`` accepts, and how
    many messages it refused."""
    lines: list[bytes] = []
    dropped = 0
    for offset, _, item in found.entries:
        if keep(item):  # type: ignore[arg-type]
            lines.append(single_line(_line(data, offset)) + b"\n")
        elif type(item) is ChatMessage:
            dropped += 1
    return lines, dropped


def rewrite(paths: Paths, lines: list[bytes]) -> None:
    """Replace the key's file by a new header and ``lines``; drop its checkpoint.

    Raises:
        OSError: the file cannot be written.
    """
    active = activity_before(paths.session_dir, os.path.basename(paths.data))
    write_atomic(paths.data, format_header(new_epoch()) + b"".join(lines))
    fsync_dir(paths.session_dir)
    unlink(paths.ckpt)
    keep_activity(paths.session_dir, active)


def remove_key(paths: Paths, lock_fd: int | None, *, keep_lease: bool = False) -> None:
    """Remove every file of one key (data, sidecars, temporary files; the lease too unless
    ``keep_lease``) and the session's summary; then the session directory if no key is left
    in it (the caller holds the flock, ``lock_fd``, or there is no session).

    Raises:
        OSError: a file cannot be removed.
    """
    agent = paths.agent_name
    names = listdir(paths.session_dir)
    active = activity_before(paths.session_dir, os.path.basename(paths.data)) if names else 0
    for name in names:
        if is_key_file(name, agent) and not (keep_lease and name == os.path.basename(paths.lease)):
            unlink(os.path.join(paths.session_dir, name))
    # Every file of a key is named without a leading dot; the lock, the summary and temporary
    # files have one.
    left = [n for n in listdir(paths.session_dir) if not n.startswith(".")]
    if not left:
        # Writers create files only under the flock, so none can appear now.
        remove_session(paths.session_dir, held_lock=lock_fd is not None)
    elif lock_fd is not None:
        keep_activity(paths.session_dir, active)  # the summary no longer lists the key


def replace_file(paths: Paths, lock_fd: int, messages: list[ChatMessage]) -> None:
    """The key's messages become ``messages`` (new seqs, a new epoch); records stay; with
    neither left the key's files go (its lease stays).

    Raises:
        OSError: the file cannot be written.
    """
    data, found = read_whole(paths.data)
    records, _ = kept_lines(data, found, lambda item: type(item) is not ChatMessage)
    if not messages and not records:
        remove_key(paths, lock_fd, keep_lease=True)
        return
    first = max(read_counter(lock_fd), found.max_seq) + 1
    lines = [format_batch(first + n, [m])[0] for n, m in enumerate(messages)]
    if messages:
        reserve(lock_fd, first + len(messages) - 1)
    rewrite(paths, records + lines)


def purge_file(paths: Paths, lock_fd: int, cutoff_us: int) -> int:
    """Drop the key's messages created before ``cutoff_us`` (µs since the Unix epoch);
    return how many. Records stay; with nothing left the key's files go (its lease stays).

    Raises:
        OSError: the file cannot be written.
    """
    data, found = read_whole(paths.data)
    messages: list[ChatMessage] = [
        item for _, _, item in found.entries if type(item) is ChatMessage
    ]
    old = [m.created_at is None or to_us(m.created_at) < cutoff_us for m in messages]
    if not any(old):
        return 0
    drop, _ = whole_tool_groups(messages, old)  # tool groups go whole
    doomed = {id(m) for m, gone in zip(messages, drop, strict=True) if gone}

    def keep(item: Item) -> bool:
        return id(item) not in doomed

    lines, dropped = kept_lines(data, found, keep)
    if not dropped:
        return 0
    if lines:
        rewrite(paths, lines)
    else:
        remove_key(paths, lock_fd, keep_lease=True)
    return dropped
