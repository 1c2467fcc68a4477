"""Opening the SQLite store's database: file mode, pragmas, version check, migration."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from storage.errors import StorageUnavailableError
from storage.stores.sqlite.schema import check_version, migrate

__all__ = ["connect"]


def connect(
    path: str, *, create: bool, busy_timeout: float, synchronous: str, where: str
) -> sqlite3.Connection:
    """A connection to ``path`` with the store's pragmas, migrated to the current schema.

    A new file is created with mode 0600 (missing parent directories 0700): chat history
    holds personal data. The schema version is read before anything is written (setting
    the journal mode writes the file's header), so a newer database is never touched.

    Raises:
        StorageUnavailableError: the file cannot be opened or is not a SQLite database, or
            it does not exist and ``create`` is false.
        SchemaVersionError: the database was written by a newer chatlayers.
    """
    on_disk = path != ":memory:" and not path.startswith("file:")
    conn: sqlite3.Connection | None = None
    try:
        if on_disk and not os.path.exists(path):
            if not create:
                raise StorageUnavailableError(
                    f"no SQLite database at {path!r} (opened with create=False, so none is "
                    "made: check the path)"
                )
            _make_private_dirs(Path(path).parent)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, cached_statements=128
        )
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        check_version(version, where)
        if path != ":memory:":
            _enable_wal(conn, busy_timeout)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        # Deleted rows and freed pages are overwritten with zeros (erasure, see writes.py).
        conn.execute("PRAGMA secure_delete = ON")
        migrate(conn, where)
    except (sqlite3.Error, OSError) as exc:
        if conn is not None:
            conn.close()
        raise StorageUnavailableError(f"cannot open SQLite database {path!r}: {exc}") from exc
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch to WAL, retrying while another connection holds the lock it needs, up to
    ``busy_timeout`` seconds: SQLite returns SQLITE_BUSY for a journal-mode change without
    calling the busy handler, so two processes opening a new file at once would otherwise
    fail (once one has switched, the others' switch is a no-op)."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and every missing parent with mode 0700 (``mkdir(parents=True)``
    gives the parents the umask's mode, not the one asked for): chat history is personal data."""
    missing: list[Path] = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for made in reversed(missing):
        made.mkdir(mode=0o700, exist_ok=True)
