"""Walking the store's directory tree: its sessions, their data files, the keys those files
stand for (from their names, or from the sidecar when a name was hashed), and removing a
session directory.
"""

from __future__ import annotations

import logging
import os

from storage.message import ChatKey
from storage.stores.jsonl.fsutil import listdir, rmdir_if_empty, unlink
from storage.stores.jsonl.names import (
    DATA_SUFFIX,
    KEY_SUFFIX,
    LOCK_NAME,
    decode_name,
    encode_name,
    read_sidecar,
)

log = logging.getLogger(__package__)  # one logger for the whole store


def data_files(session_dir: str) -> list[tuple[str, str, os.stat_result]]:
    """``(name, path, stat)`` of every data file of a session directory, sorted (a file
    removed while listing is left out)."""
    out = []
    try:
        entries = list(os.scandir(session_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        name = entry.name
        if name.endswith(DATA_SUFFIX) and not name.startswith("."):
            try:
                out.append((name, entry.path, entry.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue
    out.sort(key=lambda row: row[0])
    return out


def session_files(session_dir: str) -> list[tuple[str, str, int]]:
    """``(agent name, path, size)`` of every data file of a session directory, sorted."""
    return [(name, path, st.st_size) for name, path, st in data_files(session_dir)]


def all_sessions(
    root: str, user: str | None = None, session: str | None = None, *, nonempty: bool = False
) -> list[tuple[str, str, list[str]]]:
    """``(user dir, session dir, data files)`` of every session (of one user or session) that
    has data files (non-empty ones only with ``nonempty``)."""
    out = []
    users = [encode_name(user)] if user is not None else sorted(listdir(root))
    for user_name in users:
        user_dir = os.path.join(root, user_name)
        if user_name.startswith(".") or not os.path.isdir(user_dir):
            continue
        sessions = [encode_name(session)] if session is not None else sorted(listdir(user_dir))
        for session_name in sessions:
            session_dir = os.path.join(user_dir, session_name)
            files = [path for _, path, size in session_files(session_dir) if size or not nonempty]
            if files:
                out.append((user_dir, session_dir, files))
    return out


def agent_of(session_dir: str, name: str) -> str | None:
    """The agent id a data file's name stands for (its sidecar when the name is hashed)."""
    stem = name[: -len(DATA_SUFFIX)]
    agent = decode_name(stem)
    if agent is None:
        parts = read_sidecar(os.path.join(session_dir, stem + KEY_SUFFIX))
        if parts is not None and encode_name(parts[2]) == stem:
            agent = parts[2]
    return agent


def all_keys(root: str, user_id: str | None, session_id: str | None) -> list[ChatKey]:
    """The key of every non-empty data file (of one user or session), unsorted.

    A file whose key can be recovered neither from its names nor from a sidecar is skipped
    with a warning.
    """
    keys = []
    for _, session_dir, files in all_sessions(root, user_id, session_id, nonempty=True):
        user_name = os.path.basename(os.path.dirname(session_dir))
        session_name = os.path.basename(session_dir)
        for path in files:
            stem = os.path.basename(path)[: -len(DATA_SUFFIX)]
            parts = [decode_name(user_name), decode_name(session_name), decode_name(stem)]
            if None in parts:
                sidecar = read_sidecar(os.path.join(session_dir, stem + KEY_SUFFIX))
                if sidecar is None:
                    log.warning("%s: skipped a file whose key cannot be recovered", path)
                    continue
                parts = list(sidecar)
            keys.append(ChatKey(*parts))  # type: ignore[arg-type]
    return keys


def remove_session(session_dir: str, *, held_lock: bool) -> None:
    """Remove every file of a session directory, its lock file last, and the directory.

    The lock file is removed only by the holder of its flock: a waiter on it then sees the
    file gone and retries on a new one. Without it, the directory stays if a lock appeared.
    """
    for name in listdir(session_dir):
        if name != LOCK_NAME:
            unlink(os.path.join(session_dir, name))
    if held_lock:
        unlink(os.path.join(session_dir, LOCK_NAME))
    rmdir_if_empty(session_dir)


def session_of(session_dir: str, names: list[str]) -> str | None:
    """The session id a session directory stands for (from a key sidecar when hashed)."""
    stem = os.path.basename(session_dir)
    session = decode_name(stem)
    if session is not None:
        return session
    for name in names:
        parts = read_sidecar(os.path.join(session_dir, name[: -len(DATA_SUFFIX)] + KEY_SUFFIX))
        if parts is not None and encode_name(parts[1]) == stem:
            return parts[1]
    return None
