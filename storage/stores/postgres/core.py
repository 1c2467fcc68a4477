"""The PostgreSQL store's core: construction, the pool and schema, and the ChatStorage hooks.

The optional abilities are mixins over this class (one module each); ``PostgresChatStorage``
(:mod:`.store`) puts them together.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

import anyio
import sniffio

from storage.codec import decode, encode
from storage.durations import PositiveDuration, parse_positive_duration
from storage.errors import ConfigError, StorageUnavailableError
from storage.history import drop_orphaned_results
from storage.message import ChatKey, ChatMessage
from storage.redact import redact_text, redact_url, secrets_of_url
from storage.stores.base import BaseStore, SessionRow
from storage.stores.postgres.names import Names, check_name
from storage.stores.postgres.schema import migrate
from storage.stores.postgres.statements import Statements
from storage.stores.postgres.text import escape_column, key_args, search_words, utf8_part
from storage.stores.urls import drop_query, pop_query, query_names

if TYPE_CHECKING:
    import asyncpg

__all__ = ["DEFAULT_PURGE_INTERVAL", "PostgresCore"]

DEFAULT_PURGE_INTERVAL: Final = 3600.0  # seconds
_OWN_OPTIONS: Final = frozenset(
    {"schema", "table", "min_size", "max_size", "timeout", "retention", "purge_interval"}
)
Clock = Callable[[], float]


def _duration(what: str, value: object) -> float | None:
    if value is None:
        return None
    try:
        return parse_positive_duration(value)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ConfigError(f"postgres {what}: {exc}") from exc


async def _no_session_state(connection: object) -> None:
    """The pool's ``reset``: nothing to undo (see ``PostgresCore.__init__``)."""


class PostgresCore(BaseStore):
    """Conversations in PostgreSQL through an asyncpg pool (see the package docstring).

    Args:
        dsn: ``postgresql://[user[:password]@]host[:port]/database[?options]`` (asyncpg's
            URI syntax). Query options named like the keyword options below are read here;
            the others go to asyncpg (``sslmode=require``, ...).
        schema: the schema holding the tables (default ``"public"``; created if missing).
        table: the messages table (default ``"chatlayers_messages"``, at most 48 bytes);
            the other tables and functions are named after it (``<table>_keys``, ...).
        min_size: connections the pool keeps open (default 1).
        max_size: most connections the pool opens (default 10).
        timeout: seconds to connect and, per statement, to run (default 10).
        retention: delete messages older than this (seconds, a ``timedelta`` or a duration
            such as ``"30d"``); ``None`` (default) keeps everything.
        purge_interval: with ``retention``, writes run a purge at most once per this many
            seconds per store instance (or a duration string; default one hour).
        clock: the time in seconds since the Unix epoch, for tests (a fake clock): the
            retention cut-off, the purge interval and lease expiry read it. Default: the
            local clock (``time.time``) for retention, the server's clock for lease expiry
            (one clock for every worker, whatever their skew).
        **connect_options: passed to ``asyncpg.create_pool`` (``ssl=...``,
            ``statement_cache_size=0`` behind pgbouncer, ...).

    Raises:
        ConfigError: asyncpg is not installed (``pip install 'chatlayers[postgres]'``), or
            the DSN or an option is invalid.
    """

    scheme: ClassVar[str] = "postgresql"

    def __init__(
        self,
        dsn: str = "postgresql://localhost/postgres",
        *,
        schema: str | None = None,
        table: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        retention: PositiveDuration | None = None,
        purge_interval: PositiveDuration | None = None,
        clock: Clock | None = None,
        **connect_options: Any,
    ) -> None:
        try:
            import asyncpg
        except ImportError as exc:
            raise ConfigError(
                "PostgresChatStorage needs asyncpg: pip install 'chatlayers[postgres]'"
            ) from exc
        if not isinstance(dsn, str) or not dsn.startswith(("postgresql://", "postgres://")):
            raise ConfigError(f"not a postgresql:// URL: {redact_url(str(dsn))!r}")
        self._driver = asyncpg
        self.driver_errors = (
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            asyncpg.exceptions.InternalClientError,
            OSError,
            TimeoutError,
        )
        self._dsn, query = pop_query(dsn, _OWN_OPTIONS)
        self._secrets = secrets_of_url(dsn)  # hidden in the driver's messages too
        self.dsn = redact_url(dsn)
        try:  # a DSN given in code may carry them too (``from_url`` passes them typed)
            min_size = int(query.get("min_size", min_size))
            max_size = int(query.get("max_size", max_size))
            timeout = float(query.get("timeout", timeout))
        except ValueError as exc:
            raise ConfigError(f"postgres: bad pool option in the DSN: {exc}") from None
        self.schema = check_name("schema", schema or query.get("schema") or "public")
        self.table = check_name("table", table or query.get("table") or "chatlayers_messages")
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ConfigError(
                f"need 0 <= min_size <= max_size and max_size >= 1, got {min_size}, {max_size}"
            )
        self.retention = _duration(
            "retention", query.get("retention") if retention is None else retention
        )
        interval = _duration(
            "purge_interval",
            query.get("purge_interval") if purge_interval is None else purge_interval,
        )
        self.purge_interval = DEFAULT_PURGE_INTERVAL if interval is None else interval
        self._clock = clock
        self._last_purge: datetime | None = None
        self._pool_options: dict[str, Any] = {
            "min_size": min_size,
            "max_size": max_size,
            "timeout": timeout,
            "command_timeout": timeout,
            **connect_options,
        }
        if "reset" in inspect.signature(asyncpg.create_pool).parameters:  # asyncpg >= 0.30
            # The store leaves no session state (no SET, LISTEN, cursor or session advisory
            # lock), so a connection goes back to the pool without asyncpg's reset query:
            # one round trip less per call. asyncpg still rolls back an open transaction.
            self._pool_options.setdefault("reset", _no_session_state)
        self.names = Names(self.schema, self.table)
        self._sql = Statements.build(self.names)
        self._pool: asyncpg.Pool | None = None
        self._opening = anyio.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """Build the store from ``postgresql://...`` (``postgres://`` too) and typed options.

        Query parameters that are keyword options of the constructor (``schema``, ``table``,
        ``retention``, ...) are chatlayers'; the others (``sslmode``, ...) stay in the DSN
        asyncpg gets.

        Raises:
            ConfigError: not a PostgreSQL URL, or a bad option.
        """
        declared = {
            name
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }
        in_query = set(query_names(url))
        # A driver parameter a generic converter handed over as an option stays in the DSN.
        options = {k: v for k, v in options.items() if k in declared or k not in in_query}
        dsn = drop_query(url, declared & in_query)
        store = cls(dsn, **options)
        store.display_url = redact_url(url)
        return store

    # --- pool and schema ---------------------------------------------------------------

    def _location(self) -> str:
        return self.dsn

    def _describe_options(self) -> str:
        options = f"table={self.schema}.{self.table}"
        if self.retention is not None:
            options += f", retention={self.retention:g}s"
        return options

    def _unavailable(self, exc: BaseException) -> StorageUnavailableError:
        detail = redact_text(f"{type(exc).__name__}: {exc}", self._secrets)
        return StorageUnavailableError(f"PostgreSQL at {self.describe()}: {detail}")

    def __repr__(self) -> str:
        return f"PostgresChatStorage({self.describe()})"

    async def open(self) -> Self:
        """Create the pool and create or migrate the schema now (idempotent).

        Returns:
            The store itself.

        Raises:
            StorageUnavailableError: the server cannot be reached, refuses the login, or the
                schema cannot be created (password redacted); the next call tries again.
            SchemaVersionError: the database was written by a newer chatlayers (both
                versions named; nothing written).
            ConfigError: not running under asyncio (asyncpg is asyncio-only).
        """
        await self._get_pool()
        return self

    async def _get_pool(self) -> asyncpg.Pool:
        pool = self._pool
        if pool is not None:
            return pool
        async with self._opening:
            if self._closed:
                raise StorageUnavailableError(f"PostgreSQL store {self.describe()} is closed")
            if sniffio.current_async_library() != "asyncio":
                raise ConfigError("PostgresChatStorage needs asyncio: asyncpg is asyncio-only")
            if self._pool is not None:
                return self._pool
            pool = await self._driver.create_pool(self._dsn, **self._pool_options)
            try:
                async with pool.acquire() as conn:
                    await migrate(conn, self.names)
            except BaseException:
                pool.terminate()
                raise
            self._pool = pool
            return pool

    async def _close(self) -> None:
        async with self._opening:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            with anyio.fail_after(self._pool_options.get("timeout") or 10.0):
                await pool.close()
        except BaseException:
            pool.terminate()
            raise

    def _now(self) -> datetime:
        if self._clock is None:
            return datetime.now(UTC)
        return datetime.fromtimestamp(self._clock(), UTC)

    # --- writes --------------------------------------------------------------------------

    async def _write(
        self,
        key: ChatKey,
        batch: Sequence[ChatMessage],
        *,
        expected: str | None = None,
        replace: bool = False,
    ) -> list[ChatMessage]:
        """One call of ``<table>_save``; the messages newly stored, in order.

        A replace keeps the session's last activity. When the key's row has fallen behind its
        messages (its numbers collide with stored ones: a damaged or lost row), the row is
        rebuilt from them and the write runs again.
        """
        user, session, agent = key_args(key)
        pool = self._pool or await self._get_pool()
        ids = [escape_column(m.id) for m in batch]
        args = (
            user,
            session,
            agent,
            ids,
            [m.created_at for m in batch],
            [encode(m) for m in batch],
            [search_words(m) for m in batch],
            expected,
            replace,
        )
        for attempt in range(2):
            try:
                if replace:
                    stored: list[str] = await self._keeping_activity(
                        user, session, self._sql.save, *args
                    )
                else:
                    stored = await pool.fetchval(self._sql.save, *args)
                break
            except self._driver.UniqueViolationError as exc:
                if attempt or exc.constraint_name != self.table + "_by_key":
                    raise
                await self._repair_key(key, "its last sequence number fell behind its messages")
        if self.retention is not None and not replace:
            await self._purge_if_due(pool)
        if len(stored) == len(batch):
            return list(batch)
        new = set(stored)
        return [m for m, i in zip(batch, ids, strict=True) if i in new]

    async def _purge_if_due(self, pool: asyncpg.Pool) -> None:
        """Purge when ``purge_interval`` has passed since this instance last did."""
        now = self._now()
        last = self._last_purge
        assert self.retention is not None
        if last is not None and (now - last).total_seconds() < self.purge_interval:
            return
        self._last_purge = now  # first, so concurrent writers do not all purge
        await self._purge_before(pool, now - timedelta(seconds=self.retention))

    async def _purge_before(self, pool: asyncpg.Pool, before: datetime) -> int:
        """Delete the messages created before ``before`` (:mod:`.retention`)."""
        raise NotImplementedError

    async def _repair_key(self, key: ChatKey, why: str) -> None:
        """Rebuild a key's row from its messages (:mod:`.derived`)."""
        raise NotImplementedError

    async def _keeping_activity(self, user: str, session: str, statement: str, *args: Any) -> Any:
        """Run ``statement`` (a write that removes messages of the session) in a transaction
        that keeps the session's last activity: it never moves behind a listing cursor."""
        pool = self._pool or await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            before = await conn.fetchval(self._sql.session_last, user, session)
            result = await conn.fetchval(statement, *args)
            if before is not None:
                await conn.execute(self._sql.keep_last, user, session, before)
        return result

    # --- ChatStorage hooks -----------------------------------------------------------------

    async def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        return await self._write(key, batch)

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        user, session, agent = key_args(key)
        pool = self._pool or await self._get_pool()
        if limit is None:
            rows = await pool.fetch(self._sql.fetch, user, session, agent)
            return [decode(row[0]) for row in rows]
        rows = await pool.fetch(self._sql.fetch_last, user, session, agent, limit)
        rows.reverse()
        return drop_orphaned_results([decode(row[0]) for row in rows])

    async def _session_rows(self, user_id: str, session_id: str) -> Iterable[SessionRow]:
        pool = self._pool or await self._get_pool()
        rows = await pool.fetch(
            self._sql.session_rows,
            utf8_part("user_id", user_id),
            utf8_part("session_id", session_id),
        )
        out: list[SessionRow] = []
        for seq, agent_id, record in rows:
            message = decode(record)
            assert message.created_at is not None
            out.append((message.created_at, seq, agent_id, message))
        return out

    async def _delete(self, key: ChatKey) -> None:
        args = key_args(key)
        await self._keeping_activity(args[0], args[1], self._sql.delete, *args)

    async def _delete_user(self, user_id: str) -> None:
        pool = self._pool or await self._get_pool()
        await pool.execute(self._sql.delete_user, utf8_part("user_id", user_id))

    async def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        pool = self._pool or await self._get_pool()
        rows = await pool.fetch(
            self._sql.list_keys,
            None if user_id is None else utf8_part("user_id", user_id),
            None if session_id is None else utf8_part("session_id", session_id),
        )
        return [ChatKey(u, s, a) for u, s, a in rows]
