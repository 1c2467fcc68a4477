"""Emptying a SQLite write-ahead log after an erasure (the store's and the keyring's).

A deleted row's old page versions stay in ``-wal`` until a checkpoint copies the newest
versions (where ``secure_delete`` zeroed the cells) into the database and the log is truncated.
SQLite answers ``wal_checkpoint`` busy at once, without calling the busy handler, while another
connection writes or checkpoints, and only waits in the handler for readers: so it is retried
here until a deadline.
"""

from __future__ import annotations

import sqlite3
import time

__all__ = ["copy_wal", "truncate_wal"]


def truncate_wal(conn: sqlite3.Connection, seconds: float) -> bool:
    """``PRAGMA wal_checkpoint(TRUNCATE)`` until it is done, retried with a growing pause
    (1 ms to 50 ms) for up to ``seconds`` (each call may also wait up to the connection's
    ``busy_timeout`` for readers). True: the log holds nothing."""
    deadline = time.monotonic() + seconds
    pause = 0.001
    while True:
        (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def copy_wal(conn: sqlite3.Connection) -> bool:
    """``PRAGMA wal_checkpoint(FULL)``: every frame copied into the database (which needs
    readers only to be on the newest snapshot, not gone). True: done."""
    (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
    return not busy
