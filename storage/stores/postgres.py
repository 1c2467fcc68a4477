"""``postgresql://USER:PASSWORD@HOST:PORT/DB``: conversations in one PostgreSQL table (asyncpg).

One row per message, ordered by a ``bigserial`` sequence (never by physical position, so
``VACUUM FULL`` or any row move changes nothing), with an index on
``(user_id, session_id, agent_id, seq)`` and a unique one on the message id per key, so a
save is one ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` statement: atomic and idempotent.

The payload is ``storage.codec``'s JSON record in a ``text`` column, not ``jsonb``:

- fetching is faster: ``jsonb`` made every fetch about 1.2x slower (10 messages, 1,000, and
  the newest 20 of 10,000; ``python -m benchmarks.postgres_payload``), as the server
  re-renders each record as text;
- ``jsonb`` is lossy for this data: it reorders object keys, turns ``1e100`` into an integer
  and rejects the escape ``\\u0000``, so a message whose text holds NUL could not be stored;
- ``text`` cannot hold a NUL byte, but the JSON record never contains one (NUL in any text
  is written as the escape ``\\u0000``), key parts cannot hold NUL (``ChatKey`` refuses it)
  and a NUL in a message id is escaped (``\\0``) in the ``message_id`` column. So NUL in
  content, tool arguments, metadata or ids round-trips exactly and never reaches the server.
  To query records in SQL, cast: ``record::jsonb`` (fails only on records holding NUL).

The schema is created on first use (or by :meth:`PostgresChatStorage.open`) under an
advisory lock, with its version in ``<table>_version`` and forward migrations. asyncpg is
asyncio-only, and so is this store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Self

import anyio
import sniffio

from storage.codec import decode, encode
from storage.errors import ConfigError, InvalidKeyError, StorageUnavailableError
from storage.history import drop_orphaned_results, prepare_batch
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import AsyncContextMixin
from storage.redact import redact_text, redact_url, secrets_of_url
from storage.stores.urls import pop_query

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

    _Connection = asyncpg.Connection[Any] | PoolConnectionProxy[Any]

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresChatStorage"]

# Forward migrations: MIGRATIONS[n] takes a table from version n to n + 1. ``{t}`` is the
# qualified table, ``{by_key}``/``{by_id}`` the index names (same schema as the table).
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """CREATE TABLE IF NOT EXISTS {t} (
            seq bigserial PRIMARY KEY,
            user_id text NOT NULL,
            session_id text NOT NULL,
            agent_id text NOT NULL,
            message_id text NOT NULL,
            created_at timestamptz NOT NULL,
            record text NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS {by_key} ON {t} (user_id, session_id, agent_id, seq)",
        "CREATE UNIQUE INDEX IF NOT EXISTS {by_id} ON {t} "
        "(user_id, session_id, agent_id, message_id)",
    ),
)
SCHEMA_VERSION: Final = len(MIGRATIONS)
_OWN_OPTIONS: Final = frozenset({"schema", "table"})
_MAX_NAME: Final = 48  # bytes; leaves room for the "_by_key"/"_version" suffixes within 63


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _check_name(what: str, name: object) -> str:
    if (
        not isinstance(name, str)
        or not name
        or "\x00" in name
        or len(name.encode("utf-8", "replace")) > _MAX_NAME
    ):
        raise ConfigError(
            f"postgres {what} must be a non-empty str of at most {_MAX_NAME} bytes "
            f"without NUL, got {name!r}"
        )
    return name


def _id_column(message_id: str) -> str:
    """The ``message_id`` column value: NUL cannot be stored in ``text``, so escape it."""
    if "\x00" in message_id or "\\" in message_id:
        return message_id.replace("\\", "\\\\").replace("\x00", "\\0")
    return message_id


def _utf8(field: str, value: str) -> str:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidKeyError(
                f"{field} holds a lone surrogate at position {exc.start}, which cannot be "
                "stored as UTF-8"
            ) from None
    return value


def _key_args(key: ChatKey) -> tuple[str, str, str]:
    return (
        _utf8("user_id", key.user_id),
        _utf8("session_id", key.session_id),
        _utf8("agent_id", key.agent_id),
    )


class PostgresChatStorage(AsyncContextMixin):
    """Conversations in one PostgreSQL table, through an asyncpg connection pool.

    Nothing connects in the constructor: the pool is created, and the schema created or
    migrated, on first use. ``await store.open()`` does it up front (to fail fast at start).
    ``async with store:`` closes the pool on exit.

    Args:
        dsn: ``postgresql://[user[:password]@]host[:port]/database[?options]`` (asyncpg's
            URI syntax). Query options ``schema`` and ``table`` are read here; the others go
            to asyncpg (``sslmode=require``, ...).
        schema: the schema holding the table (default ``"public"``; created if missing).
            Overrides the DSN's ``schema``.
        table: the table name (default ``"chatlayers_messages"``, at most 48 bytes). Its
            version lives in ``<table>_version``. Overrides the DSN's ``table``.
        min_size: connections the pool keeps open (default 1).
        max_size: most connections the pool opens (default 10).
        timeout: seconds to connect and, per statement, to run (default 10).
        **connect_options: passed to ``asyncpg.create_pool`` (``ssl=...``,
            ``statement_cache_size=0`` behind pgbouncer, ...).

    Raises:
        ConfigError: asyncpg is not installed (``pip install 'chatlayers[postgres]'``), or
            the DSN or an option is invalid.
    """

    def __init__(
        self,
        dsn: str = "postgresql://localhost/postgres",
        *,
        schema: str | None = None,
        table: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
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
        self._dsn, options = pop_query(dsn, _OWN_OPTIONS)
        self._secrets = secrets_of_url(dsn)  # hidden in the driver's messages too
        self.dsn = redact_url(dsn)
        self.schema = _check_name("schema", schema or options.get("schema") or "public")
        self.table = _check_name("table", table or options.get("table") or "chatlayers_messages")
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ConfigError(
                f"need 0 <= min_size <= max_size and max_size >= 1, got {min_size}, {max_size}"
            )
        self._pool_options: dict[str, Any] = {
            "min_size": min_size,
            "max_size": max_size,
            "timeout": timeout,
            "command_timeout": timeout,
            **connect_options,
        }
        self._errors: tuple[type[BaseException], ...] = (
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            asyncpg.exceptions.InternalClientError,
            OSError,
            TimeoutError,
        )
        t = f"{_ident(self.schema)}.{_ident(self.table)}"
        self._qualified = t
        self._version_table = f"{_ident(self.schema)}.{_ident(self.table + '_version')}"
        self._ddl = {
            "t": t,
            "by_key": _ident(self.table + "_by_key"),
            "by_id": _ident(self.table + "_by_id"),
        }
        columns = "(user_id, session_id, agent_id, message_id, created_at, record)"
        conflict = "ON CONFLICT (user_id, session_id, agent_id, message_id) DO NOTHING"
        self._insert_one = (
            f"INSERT INTO {t} {columns} VALUES ($1, $2, $3, $4, $5, $6) {conflict} RETURNING seq"
        )
        self._insert_many = (
            f"INSERT INTO {t} {columns} "
            "SELECT $1::text, $2::text, $3::text, m.message_id, m.created_at, m.record "
            "FROM unnest($4::text[], $5::timestamptz[], $6::text[]) WITH ORDINALITY "
            "AS m(message_id, created_at, record, n) ORDER BY m.n "
            f"{conflict} RETURNING message_id"
        )
        where = "WHERE user_id = $1 AND session_id = $2 AND agent_id = $3"
        self._fetch = f"SELECT record FROM {t} {where} ORDER BY seq"
        self._fetch_last = f"SELECT record FROM {t} {where} ORDER BY seq DESC LIMIT $4"
        self._fetch_session = (
            f"SELECT agent_id, record FROM {t} WHERE user_id = $1 AND session_id = $2 "
            "ORDER BY created_at, seq"
        )
        self._delete = f"DELETE FROM {t} {where}"
        self._delete_user = f"DELETE FROM {t} WHERE user_id = $1"
        self._pool: asyncpg.Pool | None = None
        self._opening = anyio.Lock()
        self._closed = False

    # ------------------------------------------------------------------ pool and schema

    def _unavailable(self, exc: BaseException) -> StorageUnavailableError:
        detail = redact_text(f"{type(exc).__name__}: {exc}", self._secrets)
        return StorageUnavailableError(f"PostgreSQL at {self.dsn}: {detail}")

    async def open(self) -> Self:
        """Create the pool and create or migrate the schema now (idempotent).

        Returns:
            The store itself.

        Raises:
            StorageUnavailableError: the server cannot be reached, refuses the login, or the
                schema cannot be created (password redacted); the next call tries again.
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
                raise StorageUnavailableError(f"PostgreSQL store {self.dsn} is closed")
            if sniffio.current_async_library() != "asyncio":
                raise ConfigError("PostgresChatStorage needs asyncio: asyncpg is asyncio-only")
            if self._pool is not None:
                return self._pool
            try:
                pool = await self._driver.create_pool(self._dsn, **self._pool_options)
            except self._errors as exc:
                raise self._unavailable(exc) from exc
            try:
                async with pool.acquire() as conn:
                    await self._migrate(conn)
            except BaseException as exc:
                pool.terminate()
                if isinstance(exc, self._errors):
                    raise self._unavailable(exc) from exc
                raise
            self._pool = pool
            return pool

    async def _version(self, conn: _Connection) -> int | None:
        exists = await conn.fetchval("SELECT to_regclass($1)", self._version_table)
        if exists is None:
            return None
        value = await conn.fetchval(f"SELECT max(version) FROM {self._version_table}")
        return int(value or 0)

    async def _migrate(self, conn: _Connection) -> None:
        version = await self._version(conn)
        if version is not None and version >= SCHEMA_VERSION:
            return
        async with conn.transaction():
            # One migrator at a time across processes; the others wait, then find it done.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                f"chatlayers:{self.schema}.{self.table}",
            )
            has_schema = await conn.fetchval(
                "SELECT 1 FROM pg_namespace WHERE nspname = $1", self.schema
            )
            if not has_schema:
                await conn.execute(f"CREATE SCHEMA {_ident(self.schema)}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._version_table} (version integer NOT NULL)"
            )
            version = await self._version(conn) or 0
            if version >= SCHEMA_VERSION:
                return
            for step in MIGRATIONS[version:]:
                for statement in step:
                    await conn.execute(statement.format(**self._ddl))
            await conn.execute(f"DELETE FROM {self._version_table}")
            await conn.execute(
                f"INSERT INTO {self._version_table} (version) VALUES ($1)", SCHEMA_VERSION
            )

    # ------------------------------------------------------------------ protocol

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        """Store one message; ``[message]`` as stored, or ``[]`` for an already stored id.

        Raises:
            InvalidMessageError: the message breaks a rule; nothing is written.
            InvalidKeyError: a key part holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        return await self.save_messages(key, [message])

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        """Store a batch atomically (one statement); return the newly stored messages.

        Raises:
            InvalidMessageError: a message breaks a rule; nothing is written.
            InvalidKeyError: a key part holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted); the
                batch is stored entirely or not at all, and retrying it is safe.
        """
        batch = prepare_batch(messages)
        if not batch:
            return []
        user, session, agent = _key_args(key)
        try:
            pool = self._pool or await self._get_pool()
            if len(batch) == 1:
                m = batch[0]
                seq = await pool.fetchval(
                    self._insert_one,
                    user,
                    session,
                    agent,
                    _id_column(m.id),
                    m.created_at,
                    encode(m),
                )
                return [m] if seq is not None else []
            rows = await pool.fetch(
                self._insert_many,
                user,
                session,
                agent,
                [_id_column(m.id) for m in batch],
                [m.created_at for m in batch],
                [encode(m) for m in batch],
            )
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        if len(rows) == len(batch):
            return batch
        new = {row[0] for row in rows}
        return [m for m in batch if _id_column(m.id) in new]

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        """The conversation, oldest first; with ``limit``, an indexed ``ORDER BY seq DESC LIMIT``.

        Raises:
            ValueError: ``limit`` is negative.
            InvalidKeyError: a key part holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
            CorruptRecordError: a stored record cannot be decoded.
        """
        user, session, agent = _key_args(key)
        if limit is not None and limit <= 0:
            if limit < 0:
                raise ValueError(f"limit must be >= 0 or None, got {limit}")
            return []
        try:
            pool = self._pool or await self._get_pool()
            if limit is None:
                rows = await pool.fetch(self._fetch, user, session, agent)
            else:
                rows = await pool.fetch(self._fetch_last, user, session, agent, limit)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        if limit is None:
            return [decode(row[0]) for row in rows]
        rows.reverse()
        out = [decode(row[0]) for row in rows]
        return drop_orphaned_results(out)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        """Every agent's messages of the session, ordered by ``created_at`` then ``seq``.

        Raises:
            InvalidKeyError: a part is empty, not a string, holds NUL or a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
            CorruptRecordError: a stored record cannot be decoded.
        """
        check_key_part("user_id", user_id)
        check_key_part("session_id", session_id)
        try:
            pool = self._pool or await self._get_pool()
            rows = await pool.fetch(
                self._fetch_session, _utf8("user_id", user_id), _utf8("session_id", session_id)
            )
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return [AgentMessage(agent_id, decode(record)) for agent_id, record in rows]

    async def delete(self, key: ChatKey) -> None:
        """Erase one conversation (a no-op when it does not exist).

        Raises:
            InvalidKeyError: a key part holds a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        user, session, agent = _key_args(key)
        try:
            pool = self._pool or await self._get_pool()
            await pool.execute(self._delete, user, session, agent)
        except self._errors as exc:
            raise self._unavailable(exc) from exc

    async def delete_user(self, user_id: str) -> None:
        """Erase every conversation of the user (one statement).

        Raises:
            InvalidKeyError: ``user_id`` is empty, not a string, holds NUL or a lone surrogate.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        check_key_part("user_id", user_id)
        try:
            pool = self._pool or await self._get_pool()
            await pool.execute(self._delete_user, _utf8("user_id", user_id))
        except self._errors as exc:
            raise self._unavailable(exc) from exc

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """Every key holding at least one message, sorted by (user_id, session_id, agent_id).

        Sorted in Python (code point order, whatever the database's collation). Meant for
        export and statistics: without ``user_id`` it reads the whole table.

        Raises:
            InvalidKeyError: a filter is not a valid key part.
            StorageUnavailableError: the server cannot be reached (password redacted).
        """
        conditions: list[str] = []
        args: list[str] = []
        for field, value in (("user_id", user_id), ("session_id", session_id)):
            if value is not None:
                check_key_part(field, value)
                args.append(_utf8(field, value))
                conditions.append(f"{field} = ${len(args)}")
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        sql = f"SELECT DISTINCT user_id, session_id, agent_id FROM {self._qualified}{where}"
        try:
            pool = self._pool or await self._get_pool()
            rows = await pool.fetch(sql, *args)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        keys = [ChatKey(u, s, a) for u, s, a in rows]
        keys.sort(key=lambda k: (k.user_id, k.session_id, k.agent_id))
        return keys

    async def aclose(self) -> None:
        """Close the pool (waiting for calls in progress); the store is unusable afterwards.

        Raises:
            StorageUnavailableError: closing failed (password redacted); the pool is then
                terminated.
        """
        async with self._opening:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            with anyio.fail_after(self._pool_options.get("timeout") or 10.0):
                await pool.close()
        except self._errors as exc:
            pool.terminate()
            raise self._unavailable(exc) from exc

    def describe(self) -> str:
        return f"{self.dsn} (table={self.schema}.{self.table})"

    def __repr__(self) -> str:
        return f"PostgresChatStorage({self.describe()})"
