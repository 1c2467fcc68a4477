"""``RedisChatStorage``: the hooks over the Redis modules (see :mod:`storage.stores.redis`
for the layout, the costs and the guarantees)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Annotated, Any, Final, Self, TypeAlias
from urllib.parse import parse_qsl, urlsplit

from storage.abilities import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionPage,
    SummaryCheckpoint,
    Tail,
    Timeline,
)
from storage.checked import Check
from storage.durations import parse_positive_duration, short_duration
from storage.errors import ConfigError, InvalidArgumentError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.redact import redact_text, redact_url, secrets_of_options, secrets_of_url
from storage.stores.base import BaseStore, SessionRow, conflict
from storage.stores.options import CallableOption, check_callable, checked
from storage.stores.redis import (
    checkpoints,
    reads,
    records,
    search,
    sessions,
    timetravel,
    writes,
)
from storage.stores.redis.client import (
    ClosedError,
    ScriptClient,
    driver_keywords,
    driver_query_names,
    import_driver,
)
from storage.stores.redis.context import RedisContext
from storage.stores.redis.layout import Layout
from storage.stores.urls import check_query, drop_query

__all__ = ["DEFAULT_PREFIX", "TTL", "Prefix", "RedisChatStorage"]

DEFAULT_PREFIX: Final = "chatlayers"
OWN_OPTIONS: Final = frozenset({"prefix", "ttl", "cluster"})
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


def _flag(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"redis URL option {name}={value!r} is not a boolean (true/false)")


def _ttl_ms(ttl: float | timedelta | str | None) -> int:
    """``ttl`` in milliseconds; 0 (no expiry) for ``None`` or ``""`` (``?ttl=``).

    Raises:
        InvalidArgumentError: not a duration > 0.
    """
    if ttl is None or ttl == "":
        return 0
    return max(int(parse_positive_duration(ttl) * 1000), 1)


def check_prefix(prefix: object) -> str:
    """Raises: InvalidArgumentError: not a non-empty str without ``{`` or ``}`` (they would
    change the hash tag)."""
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise InvalidArgumentError(f"must be a non-empty str without '{{' or '}}', got {prefix!r}")
    return prefix


#: The ``ttl`` option: a duration > 0, or ``""`` for none (config checks it with the others).
TTL: TypeAlias = Annotated[float | timedelta | str, Check(_ttl_ms)]
#: The ``prefix`` option.
Prefix: TypeAlias = Annotated[str, Check(check_prefix)]


class RedisChatStorage(BaseStore):
    """Conversations in Redis, one list per key, on a single server or a Redis Cluster.

    Connections are made on first use (redis-py's pool), so the constructor never blocks.
    Implements every ability of :mod:`storage.abilities`; ``purge`` returns 0 (Redis has no
    ``retention`` period: its ``ttl`` expires every key of a session ``ttl`` after the
    session's last write, checkpoint and records included).

    Args:
        url: ``redis://[[user]:password@]host:port/db`` or ``rediss://`` (TLS). Query options
            ``prefix``, ``ttl`` (seconds or a duration such as ``30d``) and ``cluster``
            (true/false) are read here; every other option goes to redis-py
            (``socket_timeout=5``, ``ssl_ca_certs=...``).
        prefix: first part of every key (default ``"chatlayers"``); must not hold ``{`` or
            ``}`` (they would change the hash tag). Overrides the URL's ``prefix``.
        ttl: seconds (or a ``timedelta``, or a duration string) after the last write to a
            session at which its keys expire; refreshed by every write. ``None``
            (default): never.
        cluster: use ``redis.asyncio.cluster.RedisCluster`` (the URL names any one node).
            Overrides the URL's ``cluster``.
        clock: seconds since the Unix epoch (``time.time``'s convention) read for lease
            expiry. ``None`` (default): the Redis server's own clock, which every worker
            shares. Leases also carry a server-side expiry (``PX``) of their ``ttl``, so a
            dead holder's lease never outlives ``ttl`` of server time.
        **client_options: passed to ``Redis.from_url`` / ``RedisCluster.from_url``.

    Raises:
        InvalidArgumentError: a bad ``prefix``, ``ttl`` or ``clock`` given as an option.
        ConfigError: redis-py is not installed (``pip install 'chatlayers[redis]'``), or the
            URL (its scheme, a query option or value) cannot be used.
        TypeError: a keyword option neither this store nor redis-py takes.
    """

    scheme = "redis"

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: Prefix | None = None,
        ttl: TTL | None = None,
        cluster: bool | None = None,
        clock: CallableOption | None = None,
        **client_options: Any,
    ) -> None:
        redis = import_driver()
        # Set before anything can fail, so every public method translates driver errors.
        self.driver_errors = (
            redis.exceptions.RedisError,
            redis.exceptions.RedisClusterException,
            OSError,
            ClosedError,
        )
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://")):
            raise ConfigError(f"not a redis:// or rediss:// URL: {redact_url(str(url))!r}")
        self.url = redact_url(url)
        self.display_url = self.url
        self._secrets = secrets_of_url(url) | secrets_of_options(client_options)
        query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
        check_query(url, "redis", OWN_OPTIONS | driver_query_names(redis))
        if prefix is not None:
            self.prefix = checked("prefix", prefix, check_prefix)
        else:
            self.prefix = _from_url("prefix", query.get("prefix", DEFAULT_PREFIX), check_prefix)
        self.layout = Layout(self.prefix)
        if ttl is not None:
            self._ttl = _ttl_ms(ttl)
        else:
            self._ttl = _from_url("ttl", query.get("ttl"), _ttl_ms)
        self.ttl = self._ttl / 1000 if self._ttl else None
        if cluster is None:
            cluster = _flag("cluster", query.get("cluster", "false"))
        self.cluster = bool(cluster)
        unknown = set(client_options) - driver_keywords(redis, cluster=self.cluster)
        if unknown:
            raise TypeError(f"RedisChatStorage got unexpected keyword options {sorted(unknown)}")
        self.clock = checked("clock", clock, check_callable) if clock is not None else None
        try:
            self._redis = ScriptClient(
                redis,
                drop_query(url, OWN_OPTIONS),
                cluster=self.cluster,
                options=client_options,
                format_key=self.layout.format_key(),
            )
        except (ValueError, TypeError, redis.exceptions.RedisClusterException) as exc:
            detail = redact_text(str(exc), self._secrets)
            raise ConfigError(f"bad redis URL or option for {self.url}: {detail}") from None
        self._ctx = RedisContext(
            self._redis,
            self.layout,
            cluster=self.cluster,
            ttl=self._ttl,
            unusable=self._derived_unusable,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """Build the store from ``redis://…`` (or ``rediss://``) and typed options.

        ``prefix``, ``ttl`` and ``cluster`` come from ``options`` when given there, else from
        the URL's query; the driver's query options stay in the URL given to redis-py.

        Raises:
            ConfigError: not a Redis URL, an unknown query option, or a bad query value.
            InvalidArgumentError: a bad value in ``options``.
        """
        return cls(url, **options)

    @property
    def _client(self) -> Any:
        """The redis-py client (for tests and tools; the store goes through ``_redis``)."""
        return self._redis.client

    def _unavailable(self, exc: BaseException) -> StorageUnavailableError:
        detail = redact_text(f"{type(exc).__name__}: {exc}", self._secrets)
        return StorageUnavailableError(f"Redis at {self.url}: {detail}")

    def _describe_options(self) -> str:
        extra = f", ttl={short_duration(self.ttl)}" if self.ttl else ""
        kind = ", cluster" if self.cluster else ""
        return f"prefix={self.prefix!r}{extra}{kind}"

    def __repr__(self) -> str:
        return f"RedisChatStorage({self.describe()})"

    async def _close(self) -> None:
        await self._redis.aclose()

    # --- ChatStorage hooks ---------------------------------------------------------------

    async def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        return await writes.save(self._ctx, key, batch, "")

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        return await reads.fetch(self._ctx, key, limit)

    async def _session_rows(self, user_id: str, session_id: str) -> list[SessionRow]:
        return await reads.session_rows(self._ctx, user_id, session_id)

    async def _delete(self, key: ChatKey) -> None:
        await writes.delete_key(self._ctx, key)

    async def _delete_user(self, user_id: str) -> None:
        await writes.delete_user(self._ctx, user_id)

    async def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        return await reads.list_keys(self._ctx, user_id, session_id)

    # --- abilities -----------------------------------------------------------------------

    async def _head(self, key: ChatKey) -> Head:
        return await reads.head(self._ctx, key)

    async def _fetch_since(self, key: ChatKey, after: int) -> Tail:
        return await reads.fetch_since(self._ctx, key, after)

    async def _load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        return await checkpoints.load(self._ctx, key)

    async def _checkpoint_version(self, key: ChatKey, version: int) -> SummaryCheckpoint | None:
        return await checkpoints.load_version(self._ctx, key, version)

    async def _save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, expected_version: int
    ) -> SummaryCheckpoint | None:
        return await checkpoints.save(self._ctx, key, checkpoint, expected_version)

    async def _acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        return await checkpoints.acquire_lease(self._ctx, key, owner, ttl, self.clock)

    async def _release_lease(self, key: ChatKey, owner: str) -> None:
        await checkpoints.release_lease(self._ctx, key, owner)

    async def _replace(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str | None
    ) -> list[ChatMessage]:
        await writes.replace(self._ctx, key, batch, expected_version)
        return list(batch)

    async def _save_messages_if(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str
    ) -> list[ChatMessage]:
        """Checked in the save script itself (``""`` there means "unconditional", and no
        head has that version)."""
        if not batch or not expected_version:
            version = (await self._head(key)).version
            if version != expected_version:
                raise conflict(key, expected_version, version)
            return []
        return await writes.save(self._ctx, key, batch, expected_version)

    async def _list_sessions(
        self, user_id: str, limit: int, after: tuple[int, str] | None, bound: int | None
    ) -> SessionPage:
        return await sessions.list_sessions(self._ctx, user_id, limit, after, bound)

    async def _search(
        self, user_id: str, query: str, terms: list[str], limit: int
    ) -> list[SearchHit]:
        return await search.search(self._ctx, user_id, query, limit)

    async def _save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        return await records.save(self._ctx, key, record)

    async def _fetch_records(self, key: ChatKey, kind: str | None) -> list[ConversationRecord]:
        return await records.fetch(self._ctx, key, kind)

    async def _timeline(self, key: ChatKey) -> Timeline:
        return (await reads.timeline(self._ctx, key))[0]

    async def _rewind(self, key: ChatKey, to: str, rewind_id: str, now: datetime) -> int:
        return await timetravel.rewind(self._ctx, key, to, rewind_id, now)

    def _purge(self, cutoff: datetime) -> int:
        return 0  # never called: no ``retention`` (``ttl`` expires sessions on the server)


def _from_url(name: str, value: Any, check: Callable[[Any], Any]) -> Any:
    """``check(value)`` of an option read from the URL's query (a URL is config).

    Raises:
        ConfigError: the value is bad.
    """
    try:
        return check(value)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"redis URL option {name}: {exc}") from None
