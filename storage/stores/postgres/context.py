"""What the PostgreSQL store's modules share: the pool (made, and the schema created or
migrated, on first use), the statements, the names, the driver and the derived-record
report."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import sniffio

from storage.errors import ConfigError, StorageUnavailableError
from storage.stores.postgres.names import Names
from storage.stores.postgres.pool import BoundedPool
from storage.stores.postgres.schema import migrate
from storage.stores.postgres.statements import Statements

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PostgresContext", "Unusable"]

Unusable = Callable[[str, object, object], None]  # (what, where, detail): count and log it


async def _no_session_state(connection: object) -> None:
    """The pool's ``reset``: nothing to undo (see :class:`PostgresContext`)."""


class PostgresContext:
    """One store's connection to its database.

    Attributes:
        driver: the ``asyncpg`` module.
        names: the schema's and tables' names.
        sql: the statements over those names.
        unusable: reports a derived record that cannot be used (``BaseStore``'s).
        where: the store's ``describe()`` (secrets redacted), for errors.
    """

    def __init__(
        self,
        driver: Any,
        dsn: str,
        names: Names,
        pool_options: dict[str, Any],
        *,
        unusable: Unusable,
        where: Callable[[], str],
    ) -> None:
        self.driver = driver
        self.names = names
        self.sql = Statements.build(names)
        self.unusable = unusable
        self.where = where
        self._dsn = dsn
        self.pool_options = dict(pool_options)
        if "reset" in inspect.signature(driver.create_pool).parameters:  # asyncpg >= 0.30
            # The store leaves no session state (no SET, LISTEN, cursor or session advisory
            # lock), so a connection goes back to the pool without asyncpg's reset query:
            # one round trip less per call. asyncpg still rolls back an open transaction.
            self.pool_options.setdefault("reset", _no_session_state)
        self.current: BoundedPool | None = None
        self._opening = anyio.Lock()
        self.closed = False

    async def pool(self) -> BoundedPool:
        """The pool, created with the schema on first use; every wait for one of its
        connections is bounded by the ``timeout`` option (:mod:`.pool`).

        Raises:
            StorageUnavailableError: the store is closed, or the server refuses.
            SchemaVersionError: the database was written by a newer chatlayers.
            ConfigError: not running under asyncio (asyncpg is asyncio-only).
        """
        pool = self.current
        if pool is not None:
            return pool
        async with self._opening:
            if self.closed:
                raise StorageUnavailableError(f"PostgreSQL store {self.where()} is closed")
            if sniffio.current_async_library() != "asyncio":
                raise ConfigError("PostgresChatStorage needs asyncio: asyncpg is asyncio-only")
            if self.current is not None:
                return self.current
            created: asyncpg.Pool = await self.driver.create_pool(self._dsn, **self.pool_options)
            try:
                async with created.acquire() as conn:
                    await migrate(conn, self.names)
            except BaseException:
                created.terminate()
                raise
            bounded = BoundedPool(
                created,
                self.pool_options["timeout"],
                self.pool_options["max_size"],
            )
            self.current = bounded
            return bounded

    async def close(self) -> None:
        """Close the pool (terminated when it does not close within the timeout)."""
        async with self._opening:
            self.closed = True
            pool, self.current = self.current, None
        if pool is None:
            return
        try:
            with anyio.fail_after(self.pool_options.get("timeout") or 10.0):
                await pool.close()
        except BaseException:
            pool.terminate()
            raise
