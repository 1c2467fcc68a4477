""":class:`SQLiteKeyring`: wrapped data keys in a SQLite file of their own.

Tables: ``data_keys`` (one row per user), ``keyring_meta`` (the keyring's id and generation,
one row) and ``erased_keys`` (the id of each data key an erasure destroyed, never a user id).
``secure_delete`` is on and the write-ahead log is truncated after every destruction and
re-wrap, so a destroyed or re-wrapped entry leaves no old copy in the file. A keyring made
by an older release (``data_keys`` alone) gets the other two tables when first opened.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from storage.errors import ConflictError, StorageUnavailableError
from storage.layers.encrypting.errors import CREATE_HINT, KeyringMissingError
from storage.layers.encrypting.keyring_base import KeyringState, WrappedKey
from storage.stores.sqlite.wal import truncate_wal

log = logging.getLogger("storage.layers.encrypting")

__all__ = ["SQLiteKeyring"]

_TABLES: Final = (
    "CREATE TABLE IF NOT EXISTS data_keys ("
    " user_id TEXT PRIMARY KEY, key_id TEXT NOT NULL, master TEXT NOT NULL,"
    " wrapped BLOB NOT NULL, created_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS keyring_meta ("
    " one INTEGER PRIMARY KEY CHECK (one = 1), keyring_id TEXT NOT NULL,"
    " generation INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS erased_keys (key_id TEXT PRIMARY KEY, erased_at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS data_keys_by_key_id ON data_keys (key_id)",
)
_RAISE: Final = "UPDATE keyring_meta SET generation = generation + 1"


class SQLiteKeyring:
    """Wrapped data keys in a SQLite file of their own (mode 0600, ``secure_delete``).

    Calls run on the event-loop thread: a keyring lookup is one primary-key read of a tiny
    table (microseconds), cheaper than a thread hop. Several processes may share the file.
    The file is never created by a read or a save: only :meth:`create` makes it.

    Args:
        path: the keyring file (:meth:`create` makes it with mode 0600, parents 0700).
        busy_timeout: seconds to wait for another process's write lock.
        location: how the configuration named it, for messages (default: ``path`` as
            given).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        location: str | None = None,
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.location = location if location is not None else os.fspath(path)
        self._busy = busy_timeout
        self._db: sqlite3.Connection | None = None
        self._closed = False

    # --- opening -------------------------------------------------------------------------

    def _missing(self, why: str) -> KeyringMissingError:
        end = " " if why.endswith(("?", ".")) else ". "
        return KeyringMissingError(
            f"encrypt: no keyring at {self.location}: {why}{end}{CREATE_HINT}"
        )

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(
                Path(self.path).as_uri() + "?mode=rw",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
            )
            db.execute(f"PRAGMA busy_timeout = {int(self._busy * 1000)}")
            _use_wal(db, self._busy)
            db.execute("PRAGMA synchronous = FULL")  # a lost data key loses its user's data
            db.execute("PRAGMA secure_delete = ON")  # destroyed entries are zeroed on disk
        except (sqlite3.Error, OSError) as exc:
            raise StorageUnavailableError(f"keyring {self.location}: cannot open ({exc})") from exc
        return db

    def _conn(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if self._closed:
            raise StorageUnavailableError(f"keyring {self.location}: closed")
        if not os.path.exists(self.path):
            parent = os.path.dirname(self.path)
            where = "the file does not exist" + (
                "" if os.path.isdir(parent) else f", nor its directory {parent}"
            )
            raise self._missing(where + ": is the volume holding it mounted?")
        db = self._connect()
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            if "data_keys" not in tables:
                raise self._missing("the file exists but holds no keyring")
            if "keyring_meta" not in tables:  # made by an older release: add the rest
                self._init(db)
        except sqlite3.Error as exc:
            db.close()
            raise StorageUnavailableError(f"keyring {self.location}: {exc}") from exc
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    @staticmethod
    def _init(db: sqlite3.Connection) -> bool:
        """Add the tables and the identity where missing; whether this call added the
        identity (one write transaction: of processes racing here, exactly one does)."""
        with _immediate(db):
            for statement in _TABLES:
                db.execute(statement)
            cursor = db.execute(
                "INSERT OR IGNORE INTO keyring_meta VALUES (1, ?, 1)", (os.urandom(8).hex(),)
            )
        return cursor.rowcount == 1

    async def create(self) -> KeyringState:
        return (await self.create_if_absent())[1]

    async def create_if_absent(self) -> tuple[bool, KeyringState]:
        if self._closed:
            raise StorageUnavailableError(f"keyring {self.location}: closed")
        db = self._db
        if db is None:
            try:
                Path(self.path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            except OSError as exc:
                raise StorageUnavailableError(
                    f"keyring {self.location}: cannot create ({exc})"
                ) from exc
            db = self._connect()
        try:
            # Whether the file was there says nothing: another process may have made it
            # empty a moment ago. Whoever inserts the identity made the keyring.
            made = self._init(db)
        except sqlite3.Error as exc:
            if db is not self._db:
                db.close()
            raise StorageUnavailableError(f"keyring {self.location}: {exc}") from exc
        self._db = db
        return made, await self.state()

    # --- statements ----------------------------------------------------------------------

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, params)
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"keyring {self.location}: {exc}") from exc

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        try:
            with _immediate(db):
                yield db
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"keyring {self.location}: {exc}") from exc

    def _wipe_wal(self) -> None:
        # Old versions of a changed page (a destroyed wrapped key) stay in -wal until a
        # checkpoint: copy them back (where secure_delete zeroed the old cells) and truncate
        # the log, retried while other processes keep it busy; the next erasure tries again.
        try:
            done = truncate_wal(self._conn(), self._busy)
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"keyring {self.location}: {exc}") from exc
        if not done:
            log.warning(
                "keyring %s: other connections kept the write-ahead log busy for %g s: "
                "the destroyed key's wrapped copy may remain in its -wal until the next erasure",
                self.location,
                self._busy,
            )

    # --- Keyring -------------------------------------------------------------------------

    async def state(self) -> KeyringState:
        row = self._run("SELECT keyring_id, generation FROM keyring_meta").fetchone()
        if row is None:
            raise self._missing("the file holds no keyring identity")
        return KeyringState(str(row[0]), int(row[1]))

    async def get(self, user_id: str) -> WrappedKey | None:
        row = self._run(
            "SELECT key_id, master, wrapped FROM data_keys WHERE user_id = ?", (user_id,)
        ).fetchone()
        return None if row is None else WrappedKey(user_id, row[0], row[1], bytes(row[2]))

    async def add(self, entry: WrappedKey) -> WrappedKey:
        with self._write() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO data_keys VALUES (?, ?, ?, ?, ?)",
                (entry.user_id, entry.key_id, entry.master, entry.wrapped, time.time()),
            )
            if cursor.rowcount == 1:
                db.execute(_RAISE)
        stored = await self.get(entry.user_id)
        if stored is None:  # destroyed between the two statements by another process
            raise ConflictError(f"keyring: the data key of {entry.user_id!r} was just erased")
        return stored

    async def rewrap(self, entry: WrappedKey, *, expected: WrappedKey) -> bool:
        return await self.rewrap_many([(entry, expected)]) == 1

    async def rewrap_many(self, pairs: Sequence[tuple[WrappedKey, WrappedKey]]) -> int:
        if not pairs:
            return 0
        done = 0
        with self._write() as db:
            for entry, expected in pairs:
                cursor = db.execute(
                    "UPDATE data_keys SET master = ?, wrapped = ? "
                    "WHERE user_id = ? AND key_id = ? AND master = ? AND wrapped = ?",
                    (
                        entry.master,
                        entry.wrapped,
                        expected.user_id,
                        expected.key_id,
                        expected.master,
                        expected.wrapped,
                    ),
                )
                done += cursor.rowcount
        if done:
            self._wipe_wal()
        return done

    async def destroy(self, user_id: str) -> str | None:
        with self._write() as db:
            row = db.execute(
                "SELECT key_id FROM data_keys WHERE user_id = ?", (user_id,)
            ).fetchone()
            if row is not None:
                db.execute("DELETE FROM data_keys WHERE user_id = ?", (user_id,))
                db.execute("INSERT OR IGNORE INTO erased_keys VALUES (?, ?)", (row[0], time.time()))
                db.execute(_RAISE)
        self._wipe_wal()  # also on a retry, when an earlier call's wipe found the log busy
        return None if row is None else str(row[0])

    async def erased(self, key_id: str) -> bool:
        row = self._run("SELECT 1 FROM erased_keys WHERE key_id = ?", (key_id,)).fetchone()
        return row is not None

    async def owner(self, key_id: str) -> str | None:
        """The user whose live data key ``key_id`` is, or ``None``."""
        row = self._run("SELECT user_id FROM data_keys WHERE key_id = ?", (key_id,)).fetchone()
        return None if row is None else str(row[0])

    async def advance(self, generation: int) -> KeyringState:
        with self._write() as db:
            db.execute("UPDATE keyring_meta SET generation = max(generation, ?)", (generation,))
        return await self.state()

    async def entries(self) -> list[WrappedKey]:
        rows = self._run(
            "SELECT user_id, key_id, master, wrapped FROM data_keys ORDER BY user_id"
        ).fetchall()
        return [WrappedKey(u, k, m, bytes(w)) for u, k, m, w in rows]

    async def aclose(self) -> None:
        self._closed = True
        if self._db is not None:
            self._db.close()
            self._db = None


@contextlib.contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction (``BEGIN IMMEDIATE``: the write lock is taken at once, waiting
    up to the busy timeout for another process's)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _use_wal(db: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch a new keyring file to WAL. Two processes creating the file at once may see
    ``database is locked`` here without SQLite's busy handler being called: retry briefly
    (once per file's life, when it is created)."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            (mode,) = db.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)
