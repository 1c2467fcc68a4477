"""The store's asyncpg pool with every wait for a connection bounded.

asyncpg bounds connecting (``timeout``) and each statement (``command_timeout``), but its
``Pool.fetch``, ``execute``, ... and ``acquire()`` wait for a free connection without limit.
When every connection is busy (statements stuck behind a row lock, a slow or hung server),
each waiting call then lasts one statement timeout per call queued before it: with
``max_size=2`` and ``timeout=2``, a fetch of an idle conversation behind ten stuck saves
returned after 10 s. :class:`BoundedPool` waits at most ``timeout`` for a connection and
then raises ``TimeoutError`` saying so (a ``StorageUnavailableError`` at the store boundary),
so no call outlasts ``timeout`` to get a connection plus ``timeout`` per statement.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

__all__ = ["BoundedPool"]


class BoundedPool:
    """The ``asyncpg.Pool`` methods the store uses, each waiting at most ``timeout`` seconds
    for a connection.

    Args:
        pool: the asyncpg pool (closed or terminated through this object).
        timeout: seconds to wait for a free connection (connecting included).
        max_size: the pool's size, for the error message.
    """

    def __init__(self, pool: asyncpg.Pool, timeout: float, max_size: int) -> None:
        self.pool = pool
        self.timeout = timeout
        self._busy = (
            f"no connection within {timeout:g} s: all {max_size} of the pool's connections "
            "stayed busy (raise max_size, or find what holds them), or the server did not answer"
        )

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[PoolConnectionProxy[Any]]:
        """A connection of the pool for the ``async with`` block, released after it.

        Raises:
            TimeoutError: no connection was free (or could be made) within ``timeout``.
        """
        try:
            conn = await self.pool.acquire(timeout=self.timeout)
        except TimeoutError:
            raise TimeoutError(self._busy) from None
        try:
            yield conn
        finally:
            await self.pool.release(conn)

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.acquire() as conn:
            return await conn.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self.acquire() as conn:
            return await conn.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        async with self.acquire() as conn:
            return await conn.execute(query, *args)

    async def close(self) -> None:
        await self.pool.close()

    def terminate(self) -> None:
        self.pool.terminate()
