"""``PostgresChatStorage``: the options and the hooks over the PostgreSQL modules (see the
package docstring for the schema, ordering and erasure guarantees)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Annotated, Any, ClassVar, Final, Self, TypeAlias

from storage.abilities import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionPage,
    SummaryCheckpoint,
    Tail,
    Timeline,
    mark_rewound,
)
from storage.checked import Check
from storage.codec import decode
from storage.durations import PositiveDuration, parse_positive_duration, short_duration
from storage.errors import ConfigError, InvalidArgumentError, StorageUnavailableError
from storage.history import drop_orphaned_results
from storage.message import ChatKey, ChatMessage
from storage.redact import redact_text, redact_url, secrets_of_url
from storage.stores.base import BaseStore, SessionRow, conflict
from storage.stores.options import (
    Count,
    PositiveCount,
    PositiveSeconds,
    check_count,
    check_positive_count,
    check_positive_seconds,
    checked,
    option_hint,
)
from storage.stores.postgres import (
    checkpoints,
    erasure,
    records,
    retention,
    search,
    sequenced,
    sessions,
    timetravel,
    writes,
)
from storage.stores.postgres.context import PostgresContext
from storage.stores.postgres.names import Names, check_name
from storage.stores.postgres.text import key_args, utf8_part
from storage.stores.urls import drop_query, pop_query, query_names

__all__ = ["DEFAULT_PURGE_INTERVAL", "OTHER_STORES_OPTIONS", "Name", "PostgresChatStorage"]

DEFAULT_PURGE_INTERVAL: Final = 3600.0  # seconds
_OWN_OPTIONS: Final = frozenset(
    {"schema", "table", "min_size", "max_size", "timeout", "retention", "purge_interval"}
)
Clock = Callable[[], float]
# A query parameter this close to an option's name is a misspelling of it, not a server
# setting (those asyncpg sends at connect: timezone, search_path, application_name...).
_MISSPELT: Final = 0.8
# The other built-in stores' options (tests/stores/postgres/test_store.py keeps the list
# whole): on a PostgreSQL URL they are a store mix-up, not server settings.
OTHER_STORES_OPTIONS: Final = {
    **dict.fromkeys(("prefix", "cluster", "ttl"), "Redis"),
    **dict.fromkeys(("synchronous", "busy_timeout", "cache_chars", "create"), "SQLite"),
    **dict.fromkeys(("fsync", "fsync_interval", "cache_bytes", "max_cached_keys"), "JSONL"),
}


#: The ``table`` and ``schema`` options: names the store quotes (see :mod:`.names`).
Name: TypeAlias = Annotated[str, Check(check_name)]


class PostgresChatStorage(BaseStore):
    """Conversations in PostgreSQL through an asyncpg pool; every optional ability of
    ``storage.abilities``.

    Nothing connects in the constructor: the pool is created, and the schema created or
    migrated, on first use; ``await store.open()`` does it up front. ``async with store:``
    closes the pool on exit.

    Args:
        dsn: ``postgresql://[user[:password]@]host[:port]/database[?options]`` (asyncpg's
            URI syntax). Query options named like the keyword options below are read here;
            the others go to asyncpg (``sslmode=require``, ...).
        schema: the schema holding the tables (default ``"public"``; created if missing).
        table: the messages table (default ``"chatlayers_messages"``, at most 48 bytes);
            the other tables and functions are named after it (``<table>_keys``, ...).
        min_size: connections the pool keeps open (default 1).
        max_size: most connections the pool opens (default 10).
        timeout: seconds to connect, to wait for a free connection of the pool and, per
            statement, to run (default 10).
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
        InvalidArgumentError: a bad option value (``schema``, ``table``, a pool size,
            ``timeout``, ``retention``, ``purge_interval``).
        ConfigError: asyncpg is not installed (``pip install 'chatlayers[postgres]'``), or
            the DSN (its scheme, an option in its query) cannot be used.
    """

    scheme: ClassVar[str] = "postgresql"

    def __init__(
        self,
        dsn: str = "postgresql://localhost/postgres",
        *,
        schema: Name | None = None,
        table: Name | None = None,
        min_size: Count = 1,
        max_size: PositiveCount = 10,
        timeout: PositiveSeconds = 10.0,
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
        _check_driver_query(self._dsn)
        # A DSN given in code may carry options too (``from_url`` passes them typed): read
        # from there, they are config (``ConfigError``), and they win for the pool.
        sizes = {
            "min_size": _pool_option("min_size", min_size, query, check_count, int),
            "max_size": _pool_option("max_size", max_size, query, check_positive_count, int),
            "timeout": _pool_option("timeout", timeout, query, check_positive_seconds, float),
        }
        if not sizes["min_size"] <= sizes["max_size"]:
            raise InvalidArgumentError(
                f"need min_size <= max_size, got {sizes['min_size']}, {sizes['max_size']}"
            )
        self.schema = _name("schema", schema, query)
        self.table = _name("table", table, query)
        self.retention = _duration("retention", retention, query)
        interval = _duration("purge_interval", purge_interval, query)
        self.purge_interval = DEFAULT_PURGE_INTERVAL if interval is None else interval
        self._clock = clock
        self.names = Names(self.schema, self.table)
        pool_options = {
            "min_size": sizes["min_size"],
            "max_size": sizes["max_size"],
            "timeout": sizes["timeout"],
            "command_timeout": sizes["timeout"],
            **connect_options,
        }
        self._ctx = PostgresContext(
            asyncpg,
            self._dsn,
            self.names,
            pool_options,
            unusable=self._derived_unusable,
            where=self.describe,
        )
        self._sql = self._ctx.sql

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """Build the store from ``postgresql://...`` (``postgres://`` too) and typed options.

        Query parameters that are keyword options of the constructor (``schema``, ``table``,
        ``retention``, ...) are chatlayers'; the others (``sslmode``, ...) stay in the DSN
        asyncpg gets.

        Raises:
            ConfigError: not a PostgreSQL URL, or a bad option in its query.
            InvalidArgumentError: a bad value in ``options``.
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

    @property
    def _pool(self) -> Any:
        """The asyncpg pool, or ``None`` before first use (for tests and tools)."""
        return self._ctx.current

    def _location(self) -> str:
        return self.dsn

    def _describe_options(self) -> str:
        options = f"table={self.schema}.{self.table}"
        if self.retention is not None:
            options += f", retention={short_duration(self.retention)}"
        return options

    def _unavailable(self, exc: BaseException) -> StorageUnavailableError:
        said = str(exc) or (  # asyncpg's statement timeout says nothing
            f"no answer within {self._ctx.pool_options['timeout']:g} s (the timeout option)"
            if isinstance(exc, TimeoutError)
            else ""
        )
        detail = redact_text(f"{type(exc).__name__}: {said}", self._secrets)
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
        self._check_open()
        await self._ctx.pool()
        return self

    async def vacuum(self, *, full: bool = True) -> None:
        """``VACUUM`` (``FULL`` by default) every table of the store, so the bytes of deleted
        rows leave the data files (``FULL`` rewrites each table and its indexes; see
        :mod:`.erasure` for what remains in WAL, archives and replicas).

        Args:
            full: rewrite the tables (``VACUUM FULL``: erased text gone from the data files
                once the next checkpoint removes the old files; blocks each table while it
                runs) or only mark dead rows reusable (plain ``VACUUM``, no blocking).

        Raises:
            StorageUnavailableError: the server cannot be reached, or the login may not
                vacuum these tables (password redacted).
        """
        self._check_open()
        await erasure.vacuum(self._ctx, full=full)

    async def _close(self) -> None:
        await self._ctx.close()

    # --- ChatStorage hooks ---------------------------------------------------------------

    async def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        return await writes.write(self._ctx, key, batch)

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        user, session, agent = key_args(key)
        ctx = self._ctx
        pool = ctx.current or await ctx.pool()
        if limit is None:
            rows = await pool.fetch(ctx.sql.fetch, user, session, agent)
            return [decode(row[0]) for row in rows]
        rows = await pool.fetch(ctx.sql.fetch_last, user, session, agent, limit)
        rows.reverse()
        return drop_orphaned_results([decode(row[0]) for row in rows])

    async def _session_rows(self, user_id: str, session_id: str) -> list[SessionRow]:
        ctx = self._ctx
        pool = await ctx.pool()
        rows = await pool.fetch(
            ctx.sql.session_rows,
            utf8_part("user_id", user_id),
            utf8_part("session_id", session_id),
        )
        out: list[SessionRow] = []
        for seq, agent_id, record, rewound in rows:
            message = decode(record)
            if rewound is not None:
                message = mark_rewound(message, rewound.isoformat())
            assert message.created_at is not None
            out.append((message.created_at, seq, agent_id, message))
        return out

    async def _delete(self, key: ChatKey) -> None:
        await writes.delete_key(self._ctx, key)

    async def _delete_user(self, user_id: str) -> None:
        await writes.delete_user(self._ctx, user_id)

    async def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        ctx = self._ctx
        pool = await ctx.pool()
        rows = await pool.fetch(
            ctx.sql.list_keys,
            None if user_id is None else utf8_part("user_id", user_id),
            None if session_id is None else utf8_part("session_id", session_id),
        )
        return [ChatKey(u, s, a) for u, s, a in rows]

    # --- abilities -----------------------------------------------------------------------

    async def _head(self, key: ChatKey) -> Head:
        return await sequenced.head(self._ctx, key)

    async def _fetch_since(self, key: ChatKey, after: int) -> Tail:
        return await sequenced.fetch_since(self._ctx, key, after)

    async def _load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        return await checkpoints.load(self._ctx, key)

    async def _checkpoint_version(self, key: ChatKey, version: int) -> SummaryCheckpoint | None:
        return await checkpoints.load_version(self._ctx, key, version)

    async def _save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, expected_version: int
    ) -> SummaryCheckpoint | None:
        return await checkpoints.save(self._ctx, key, checkpoint, expected_version)

    async def _acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        now = self._now() if self._clock is not None else None  # None: the server's clock
        return await checkpoints.acquire_lease(self._ctx, key, owner, ttl, now)

    async def _release_lease(self, key: ChatKey, owner: str) -> None:
        await checkpoints.release_lease(self._ctx, key, owner)

    async def _replace(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str | None
    ) -> list[ChatMessage]:
        return await writes.write(self._ctx, key, batch, expected=expected_version, replace=True)

    async def _save_messages_if(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str
    ) -> list[ChatMessage]:
        if not batch:
            version = (await self._head(key)).version
            if version != expected_version:
                raise conflict(key, expected_version, version)
            return []
        return await writes.write(self._ctx, key, batch, expected=expected_version)

    async def _list_sessions(
        self, user_id: str, limit: int, after: tuple[int, str] | None, bound: int | None
    ) -> SessionPage:
        return await sessions.list_sessions(self._ctx, user_id, limit, after, bound)

    async def _search(
        self, user_id: str, query: str, terms: list[str], limit: int
    ) -> list[SearchHit]:
        return await search.search(self._ctx, user_id, terms, limit)

    async def _save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        return await records.save(self._ctx, key, record)

    async def _fetch_records(self, key: ChatKey, kind: str | None) -> list[ConversationRecord]:
        return await records.fetch(self._ctx, key, kind)

    async def _timeline(self, key: ChatKey) -> Timeline:
        return await timetravel.timeline(self._ctx, key)

    async def _rewind(self, key: ChatKey, to: str, rewind_id: str, now: datetime) -> int:
        return await timetravel.rewind(self._ctx, key, to, rewind_id, now)

    async def _purge(self, cutoff: datetime) -> int:
        return await retention.purge(self._ctx, cutoff)


def _pool_option(
    name: str,
    given: Any,
    query: dict[str, str],
    check: Callable[[Any], Any],
    convert: Callable[[str], Any],
) -> Any:
    """A pool option: from the DSN when it is there, else the one given, checked."""
    if name in query:
        return _from_dsn(name, query[name], lambda raw: check(convert(raw)))
    return checked(name, given, check)


def _from_dsn(name: str, value: str, check: Callable[[str], Any]) -> Any:
    """An option read from the DSN's query, checked (a DSN is config).

    Raises:
        ConfigError: the value is bad.
    """
    try:
        return check(value)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"postgres: bad option {name}={value!r} in the DSN: {exc}") from None


_DEFAULT_NAMES: Final = {"schema": "public", "table": "chatlayers_messages"}


def _name(what: str, given: str | None, query: dict[str, str]) -> str:
    """The ``schema`` or ``table`` option: given, else from the DSN, else the default."""
    if given is not None:
        return checked(what, given, check_name)
    name: str = _from_dsn(what, query.get(what) or _DEFAULT_NAMES[what], check_name)
    return name


def _duration(what: str, given: object, query: dict[str, str]) -> float | None:
    """A duration option: given, else from the DSN, else ``None``."""
    if given is not None:
        checked(what, given, parse_positive_duration)
        return parse_positive_duration(given)  # type: ignore[arg-type]
    raw = query.get(what)
    if raw is None:
        return None
    seconds: float = _from_dsn(what, raw, parse_positive_duration)
    return seconds


def _check_driver_query(dsn: str) -> None:
    """Refuse a query parameter left for the driver (asyncpg sends each to the server as a
    setting) that is a chatlayers option misspelt (``retension``, ``tabel``), another
    store's expiry (``ttl``, ``expiry``) or option (``prefix``): the server would refuse the
    connection with "unrecognized configuration parameter", every call, far from the URL.

    Raises:
        ConfigError: such a parameter, with the option meant.
    """
    for name in query_names(dsn):
        hint = option_hint(name, _OWN_OPTIONS, n=1, cutoff=_MISSPELT)
        other = OTHER_STORES_OPTIONS.get(name)
        if hint or other:
            hint = hint or f" (an option of the {other} store)"
            raise ConfigError(
                f"{name!r} is not an option of the PostgreSQL store{hint}; its options "
                f"are {', '.join(sorted(_OWN_OPTIONS))}, any other query parameter is a "
                "server setting asyncpg sends at connect"
            )
