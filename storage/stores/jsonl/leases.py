"""Summarizing leases: one small file per key, ``<agent>.lease``, changed under the flock.

::

    {"owner":"worker-7f3a","until":1718000030.25}

``until`` is in seconds of the store's clock (Unix time by default, so every process on the
machine agrees; tests inject a clock). The file is replaced atomically (temporary file and
rename, no fsync: a lease lost in a power cut only lets another worker summarize sooner), so
a kill -9 leaves the old lease or the new one. An unreadable lease file counts as no lease.
"""

from __future__ import annotations

import json

from storage.stores.jsonl.fsutil import unlink, write_atomic
from storage.stores.jsonl.locks import flock
from storage.stores.jsonl.names import Paths


def read_lease(path: str) -> tuple[str, float] | None:
    """``(owner, until)`` of the lease at ``path``, or ``None``."""
    try:
        with open(path, "rb") as f:
            raw = json.loads(f.read())
        owner, until = raw["owner"], raw["until"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(owner, str) or isinstance(until, bool) or not isinstance(until, int | float):
        return None
    return owner, float(until)


def acquire(path: str, owner: str, ttl: float, now: float) -> bool:
    """Take or extend the lease for ``owner`` unless another owner holds an unexpired one (the
    caller holds the session's flock).

    Raises:
        OSError: the lease file cannot be written.
    """
    held = read_lease(path)
    if held is not None and held[0] != owner and held[1] > now:
        return False
    body = json.dumps({"owner": owner, "until": now + ttl}, ensure_ascii=False) + "\n"
    write_atomic(path, body.encode("utf-8"), sync=False)
    return True


def release(path: str, owner: str) -> None:
    """Remove the lease if ``owner`` holds it (the caller holds the session's flock).

    Raises:
        OSError: the lease file cannot be removed.
    """
    held = read_lease(path)
    if held is not None and held[0] == owner:
        unlink(path)


def acquire_locked(paths: Paths, owner: str, ttl: float, now: float) -> bool:
    """:func:`acquire` under the session's flock (its directories made when missing)."""
    with flock(paths):
        return acquire(paths.lease, owner, ttl, now)


def release_locked(paths: Paths, owner: str) -> None:
    """:func:`release` under the session's flock (nothing to do without a session)."""
    with flock(paths, make_dirs=False) as lock_fd:
        if lock_fd is not None:
            release(paths.lease, owner)
