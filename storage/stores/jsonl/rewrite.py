"""Rewriting a key's file whole, under the session's flock: ``replace``, retention purges,
and removing a key's files.

A rewrite writes a new file with a fresh header (a new epoch: the key's messages changed
other than by appending), fsyncs it, renames it over the old one and fsyncs the directory;
the key's checkpoint is removed after the rename (a crash between leaves a checkpoint of the
old epoch, which is void). Readers see the old file or the new one. Lines kept are copied
byte for byte without their batch marks (the rename makes the new file atomic as a whole).
Whatever removes messages keeps the session's last activity (``sessions.keep_activity``), and
a purge removes tool groups whole and no orphaned answers stay at the front
(:func:`storage.purge.purge_mask`).

The entry points (:func:`replace_key`, :func:`delete_key`, :func:`delete_user`,
:func:`purge_root`) take the session's flock themselves and run on a worker thread; each
calls ``forget`` for every file it changed, so the store drops what it cached of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from storage.abilities import ConversationRecord, Head, Rewind
from storage.message import ChatKey, ChatMessage
from storage.purge import purge_mask
from storage.stores.base import EMPTY_HEAD, conflict
from storage.stores.epochs import new_epoch
from storage.stores.jsonl.cache import LineCache
from storage.stores.jsonl.fsutil import fsync_dir, listdir, rmdir_if_empty, unlink, write_atomic
from storage.stores.jsonl.header import format_header
from storage.stores.jsonl.lines import (
    Hidden,
    Item,
    Scan,
    decode_entry,
    format_batch,
    memory_lines,
    single_line,
)
from storage.stores.jsonl.lines import scan as scan_lines
from storage.stores.jsonl.locks import flock, read_counter, reserve
from storage.stores.jsonl.names import (
    Paths,
    file_paths,
    is_key_file,
    read_sidecar,
    session_paths,
    write_sidecar,
)
from storage.stores.jsonl.reads import read_since
from storage.stores.jsonl.sessions import (
    activity_before,
    keep_activity,
    store_summary,
    summarize_session,
)
from storage.stores.jsonl.tree import all_sessions, remove_session
from storage.stores.times import to_us

Forget = Callable[[Paths], None]  # drop what the store cached of one key's files


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
        elif type(item) is ChatMessage or type(item) is Hidden:
            dropped += 1
    return lines, dropped


def rewrite(paths: Paths, lines: list[bytes], rewinds: Sequence[Rewind] = ()) -> None:
    """Replace the key's file by a new header (a new epoch, holding ``rewinds``) and
    ``lines``; drop its checkpoint and every version of it (the record was renumbered).

    Raises:
        OSError: the file cannot be written.
    """
    write_file(paths, format_header(new_epoch(), rewinds) + b"".join(lines))
    unlink(paths.ckpt)
    unlink(paths.versions)


def write_file(paths: Paths, data: bytes) -> None:
    """Replace the key's file by ``data`` atomically, keeping the session's last activity.

    Raises:
        OSError: the file cannot be written.
    """
    active = activity_before(paths.session_dir, os.path.basename(paths.data))
    write_atomic(paths.data, data)
    fsync_dir(paths.session_dir)
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
    records, _ = kept_lines(data, found, lambda item: type(item) is ConversationRecord)
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
    # The whole record, rewound messages included (they are purged like any other).
    items = [item for _, _, item in found.entries if type(item) is not ConversationRecord]
    messages = [
        item.message if isinstance(item, Hidden) else item
        for item in items
        if isinstance(item, (ChatMessage, Hidden))
    ]
    old = [m.created_at is None or to_us(m.created_at) < cutoff_us for m in messages]
    if not any(old):
        return 0
    drop, _ = purge_mask(messages, old)
    doomed = {id(item) for item, gone in zip(items, drop, strict=True) if gone}

    def keep(item: Item) -> bool:
        return id(item) not in doomed

    lines, dropped = kept_lines(data, found, keep)
    if not dropped:
        return 0
    if lines:
        rewrite(paths, lines, found.rewinds)  # hidden lines stay hidden
    else:
        remove_key(paths, lock_fd, keep_lease=True)
    return dropped


def version(paths: Paths, cache: LineCache) -> str:
    """The key's ``Head.version`` (``"epoch.last_seq"``) read from its file."""
    epoch, newest, _ = read_since(paths.data, paths.lock, 0, cache, limit=1)
    return (Head(newest, epoch) if newest else EMPTY_HEAD).version


def replace_key(
    paths: Paths,
    key: ChatKey,
    batch: list[ChatMessage],
    expected_version: str | None,
    cache: LineCache,
    forget: Forget,
) -> None:
    """Make ``batch`` the key's messages under the session's flock (:func:`replace_file`),
    only while its version is ``expected_version`` when given.

    Raises:
        ConflictError: the key's version is not ``expected_version`` (nothing changed).
        OSError: a file cannot be read or written.
    """
    with flock(paths, sync_dirs=True) as lock_fd:
        assert lock_fd is not None
        try:
            if expected_version is not None:
                found = version(paths, cache)
                if found != expected_version:
                    raise conflict(key, expected_version, found)
            full = [key.user_id, key.session_id, key.agent_id]
            if batch and paths.sidecar is not None and read_sidecar(paths.sidecar) != full:
                write_sidecar(paths.sidecar, key)  # the full key beside a hashed name
            replace_file(paths, lock_fd, batch)
        finally:
            forget(paths)
    rmdir_if_empty(paths.user_dir)


def delete_key(paths: Paths, forget: Forget) -> None:
    """Erase one conversation's files under the session's flock (:func:`remove_key`).

    Raises:
        OSError: a file cannot be removed.
    """
    with flock(paths, make_dirs=False) as lock_fd:
        remove_key(paths, lock_fd)
        forget(paths)
    rmdir_if_empty(paths.user_dir)


def delete_user(user_dir: str) -> None:
    """Erase every session directory of a user, each under its flock.

    Raises:
        OSError: a file cannot be removed.
    """
    for session in listdir(user_dir):
        session_dir = os.path.join(user_dir, session)
        if not os.path.isdir(session_dir):
            unlink(session_dir)
            continue
        with flock(session_paths(user_dir, session_dir), make_dirs=False) as lock_fd:
            remove_session(session_dir, held_lock=lock_fd is not None)
    rmdir_if_empty(user_dir)


def purge_root(root: str, cutoff_us: int, forget: Forget) -> int:
    """Purge every file under ``root`` holding a message older than ``cutoff_us``: a walk
    with each session's summary, and only those files read whole and rewritten; how many
    messages went.

    Raises:
        OSError: a file cannot be read or rewritten.
    """
    removed = 0
    for user_dir, session_dir, _ in all_sessions(root):
        summary, changed = summarize_session(session_dir)
        old = [n for n, e in summary.files.items() if e.count and e.min_us < cutoff_us]
        paths = session_paths(user_dir, session_dir)
        if not old:
            if changed:
                store_summary(paths, summary)
            continue
        # flock alone excludes writers of this and other processes (its own descriptor).
        with flock(paths, make_dirs=False) as lock_fd:
            if lock_fd is None:
                continue
            for name in old:
                key_file = file_paths(user_dir, session_dir, name)
                try:
                    removed += purge_file(key_file, lock_fd, cutoff_us)
                finally:
                    forget(key_file)
        rmdir_if_empty(user_dir)
    return removed
