"""The driver side of the Redis store: redis-py imported lazily, scripts run with EVALSHA.

redis-py's asyncio client is asyncio-only, and so is the Redis store.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio

from storage.codec import FORMAT_VERSION
from storage.errors import ConfigError, SchemaVersionError
from storage.stores.base import require_asyncio
from storage.stores.redis.scripts import UPGRADE_FORMAT, Script

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = ["ClosedError", "ScriptClient", "driver_keywords", "driver_query_names", "import_driver"]

_CLUSTER_OPTIONS: Final = frozenset(
    {
        "read_from_replicas",
        "require_full_coverage",
        "reinitialize_steps",
        "cluster_error_retry_attempts",
    }
)


def import_driver() -> Any:
    """The ``redis`` package with its asyncio client loaded.

    Raises:
        ConfigError: redis-py is not installed (the error names the extra to install).
    """
    try:
        import redis
        import redis.asyncio
        import redis.asyncio.cluster
        import redis.exceptions
    except ImportError as exc:
        raise ConfigError(
            "RedisChatStorage needs redis-py: pip install 'chatlayers[redis]'"
        ) from exc
    return redis


def driver_query_names(redis: Any) -> set[str]:
    """The query options redis-py understands in a URL (the rest would fail at connect)."""
    from redis.asyncio import connection

    names = set(getattr(connection, "URL_QUERY_ARGUMENT_PARSERS", {}))
    for cls in (connection.AbstractConnection, connection.SSLConnection):
        names |= set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs", "args"}
    names |= {"ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_ca_path"}
    return names | _CLUSTER_OPTIONS


def driver_keywords(redis: Any, *, cluster: bool) -> set[str]:
    """The keyword options redis-py's client (``Redis`` or ``RedisCluster``) takes."""
    from redis.asyncio import connection

    client = redis.asyncio.cluster.RedisCluster if cluster else redis.asyncio.Redis
    names = set(inspect.signature(client.__init__).parameters)
    for cls in (connection.AbstractConnection, connection.SSLConnection):
        names |= set(inspect.signature(cls.__init__).parameters)
    return names - {"self", "kwargs", "args"}


class ClosedError(Exception):
    """A call after ``aclose`` (the store translates it into ``StorageUnavailableError``)."""


#: The format of a prefix with a rewind (a prefix is first used as :data:`FORMAT_VERSION`,
#: which older releases read too): rewound messages live beside the lists, where a release
#: before time travel would neither list nor erase them.
REWOUND_FORMAT: Final = 2
KNOWN_FORMATS: Final = frozenset({FORMAT_VERSION, REWOUND_FORMAT})


class ScriptClient:
    """One redis-py client (a single server or a Cluster) with script helpers.

    Every command goes through :meth:`ready`, which refuses once the client is closed
    (redis-py itself would quietly reconnect).
    """

    def __init__(
        self,
        redis: Any,
        url: str,
        *,
        cluster: bool,
        options: dict[str, Any],
        format_key: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.format_key = format_key
        self._format_checked = format_key is None
        self._rewound_format = False
        self._no_script = redis.exceptions.NoScriptError
        if cluster:
            self.client: Redis | RedisCluster = redis.asyncio.cluster.RedisCluster.from_url(
                url, **options
            )
        else:
            self.client = redis.asyncio.Redis.from_url(url, **options)
        self._init_lock = anyio.Lock()
        self.closed = False
        self._on_asyncio = False  # checked once: redis-py's asyncio client needs asyncio

    async def ready(self) -> Redis | RedisCluster:
        """The client, its Cluster nodes discovered.

        redis-py's asyncio ``RedisCluster`` (8.1) fails with ``AttributeError`` on
        ``_writer`` when many tasks send their first commands while it initializes (or
        re-initializes after an error), so one task initializes under a lock first.
        """
        if self.closed:
            raise ClosedError("the store is closed")
        if not self._on_asyncio:
            require_asyncio("RedisChatStorage")
            self._on_asyncio = True
        client = self.client
        if self.cluster and getattr(client, "_initialize", False):
            async with self._init_lock:
                if getattr(client, "_initialize", False):
                    await client.initialize()
        if not self._format_checked:
            await self._check_format(client)
        return client

    async def _check_format(self, client: Redis | RedisCluster) -> None:
        """Before the first command: the prefix's format version (``FORMAT_VERSION``, set
        on first use), refused when a newer chatlayers wrote it, like a database's schema
        version (nothing is written then)."""
        key = self.format_key
        assert key is not None
        raw = await client.get(key)
        if raw is None:
            await client.set(key, str(FORMAT_VERSION), nx=True)
            raw = await client.get(key)
        try:
            found = int(raw) if isinstance(raw, bytes | str) else -1
        except ValueError:
            found = -1
        if found not in KNOWN_FORMATS:
            shown = found if found > 0 else repr(raw)
            raise SchemaVersionError(
                f"Redis key {key!r} says the data under this prefix has format version "
                f"{shown}, newer than version {REWOUND_FORMAT}, the newest this chatlayers "
                "knows: upgrade chatlayers to use it (nothing was written)"
            )
        self._format_checked = True
        self._rewound_format = found >= REWOUND_FORMAT

    async def rewound_format(self) -> None:
        """Before the first rewind under the prefix: its format version raised to
        :data:`REWOUND_FORMAT` (once per instance), so older releases refuse the data."""
        if self._rewound_format or self.format_key is None:
            return
        await self.eval(UPGRADE_FORMAT, [self.format_key], [REWOUND_FORMAT])
        self._rewound_format = True

    async def eval(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run ``script`` (loading it when the server does not know it)."""
        client = await self.ready()
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args)
        except self._no_script:
            await client.script_load(script.source)
            return await client.evalsha(script.sha, len(keys), *keys, *args)

    async def eval_many(
        self, script: Script, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]
    ) -> list[Any]:
        """Run a *read-only* ``script`` once per ``(keys, args)``: one pipelined round trip
        on a single server (the whole pipeline runs again after NOSCRIPT, which only a
        read may do); one call after the other on a Cluster (each may be on another node)."""
        if not calls:
            return []
        client = await self.ready()
        if self.cluster:
            return [await self.eval(script, keys, args) for keys, args in calls]
        for attempt in (0, 1):
            pipe = client.pipeline(transaction=False)
            for keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            try:
                return list(await pipe.execute())
            except self._no_script:
                if attempt:
                    raise
                await client.script_load(script.source)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        self.closed = True
        await self.client.aclose()
