"""``redis://HOST:PORT/DB?prefix=P``: conversations in Redis lists, on one server or a Cluster.

Layout (``P`` = prefix; ``U``, ``S``, ``A`` = the user, session and agent ids percent-encoded)::

    P:{U:S}:m:A   LIST    the conversation, oldest first; each entry is "SEQ RECORD"
    P:{U:S}:i:A   SET     the message ids stored for the key (idempotent saves)
    P:{U:S}:a     SET     the session's agents (encoded), for fetch_all_chats
    P:{U:S}:n     STRING  the session's sequence (INCR), breaks created_at ties
    P:{U}:s       SET     the user's sessions (encoded), for delete_user

Percent-encoding keeps only RFC 3986 unreserved characters (``A-Z a-z 0-9 - . _ ~``), so an
encoded part never holds ``:``, ``{``, ``}``, ``*``, ``?``, ``[`` or ``]``: keys cannot
collide, every key of a session shares the hash tag ``{U:S}`` (one Cluster slot, so each
operation on a session is one atomic Lua script), and no command ever takes a pattern
(``delete_user`` reads the user's session set instead of ``KEYS``/``SCAN``). RECORD is
``storage.codec``'s JSON.

The user's session set lives in another slot, so it is kept consistent without a
cross-slot transaction: a save adds the session to it *before* writing (a crash can leave a
stale entry, never unlisted data) and again after the write that created the session; a
delete removes it after erasing the session's data and puts it back if a concurrent save
recreated the session meanwhile. So ``delete_user`` always finds every session.

Durability is the server's: with ``appendonly yes`` (``appendfsync everysec``) a killed
``redis-server`` loses no acknowledged save; ``appendfsync always`` survives power loss too.
redis-py's asyncio client is asyncio-only, and so is this store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import quote, unquote

import anyio

from storage.codec import decode, encode
from storage.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidKeyError,
    StorageUnavailableError,
)
from storage.history import drop_orphaned_results, prepare_batch
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import AsyncContextMixin
from storage.redact import redact_text, redact_url, secrets_of_url
from storage.stores.urls import pop_query

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = ["RedisChatStorage"]

DEFAULT_PREFIX: Final = "chatlayers"
_OWN_OPTIONS: Final = frozenset({"prefix", "ttl", "cluster"})
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


class _Script:
    """A Lua script run with EVALSHA (loaded on NOSCRIPT, e.g. after a restart or failover)."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


# KEYS: list, ids, agents, counter. ARGV: ttl_ms (0 = none), encoded agent, id1, record1, ...
# Returns {fresh, {1-based indexes of the newly stored messages}}; fresh = the session did
# not exist before. Atomic: Redis runs a script alone, and nothing below can fail midway on
# keys of the right types.
_SAVE: Final = _Script("""
local fresh = redis.call('EXISTS', KEYS[3]) == 0 and 1 or 0
local stored = {}
for i = 3, #ARGV, 2 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    local seq = redis.call('INCR', KEYS[4])
    redis.call('RPUSH', KEYS[1], string.format('%d ', seq) .. ARGV[i + 1])
    stored[#stored + 1] = (i - 1) / 2
  end
end
if #stored > 0 then
  redis.call('SADD', KEYS[3], ARGV[2])
end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  for k = 1, 4 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
return {fresh, stored}
""")

# KEYS: agents. ARGV: the session's key base "P:{U:S}:". Returns {agent, {entries}, ...}.
# The list keys are derived from the agents set; they share the session's hash tag (slot).
_FETCH_SESSION: Final = _Script("""
local out = {}
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = agent
  out[#out + 1] = redis.call('LRANGE', ARGV[1] .. 'm:' .. agent, 0, -1)
end
return out
""")

# KEYS: list, ids, agents, counter. ARGV: encoded agent. Returns 1 when the session is now empty.
_DELETE: Final = _Script("""
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[4])
  return 1
end
return 0
""")

# KEYS: agents. ARGV: the session's key base. The agents whose list exists (TTL may have
# expired a list before the session's agents set).
_LIST_AGENTS: Final = _Script("""
local out = {}
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. 'm:' .. agent) == 1 then
    out[#out + 1] = agent
  end
end
return out
""")

# KEYS: agents, counter. ARGV: the session's key base. Erases the whole session.
_DELETE_SESSION: Final = _Script("""
for _, agent in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  redis.call('DEL', ARGV[1] .. 'm:' .. agent, ARGV[1] .. 'i:' .. agent)
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
""")


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


@lru_cache(maxsize=16384)
def _encode_part(value: str) -> str:
    return quote(value, safe="")


def _part(field: str, value: str) -> str:
    """The percent-encoded form of a key part (injective; no ``:{}*?[]`` left)."""
    try:
        return _encode_part(value)
    except UnicodeEncodeError as exc:
        raise InvalidKeyError(
            f"{field} holds a lone surrogate at position {exc.start}, which cannot be stored "
            "as UTF-8"
        ) from None


def _entry(raw: bytes) -> tuple[int, bytes]:
    """Split a list entry ``b"SEQ RECORD"``."""
    try:
        cut = raw.index(b" ")
        return int(raw[:cut]), raw[cut + 1 :]
    except ValueError as exc:
        raise CorruptRecordError(f"malformed Redis list entry {raw[:80]!r}") from exc


def _record(raw: bytes) -> bytes:
    cut = raw.find(b" ")
    if cut < 0:
        raise CorruptRecordError(f"malformed Redis list entry {raw[:80]!r}")
    return raw[cut + 1 :]


def _flag(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"redis URL option {name}={value!r} is not a boolean (true/false)")


def _ttl_ms(ttl: float | timedelta | str | None) -> int:
    if ttl is None or ttl == "":
        return 0
    try:
        seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    except ValueError:
        raise ConfigError(f"redis ttl must be a number of seconds, got {ttl!r}") from None
    if not seconds > 0:
        raise ConfigError(f"redis ttl must be > 0 seconds (or None for no expiry), got {ttl!r}")
    return max(int(seconds * 1000), 1)


class RedisChatStorage(AsyncContextMixin):
    """Conversations in Redis lists, one per key, on a single server or a Redis Cluster.

    Connections are made on first use (redis-py's pool), so the constructor never blocks.

    Args:
        url: ``redis://[[user]:password@]host:port/db`` or ``rediss://`` (TLS). Query options
            ``prefix``, ``ttl`` (seconds) and ``cluster`` (true/false) are read here; every
            other option goes to redis-py (``socket_timeout=5``, ``ssl_ca_certs=...``).
        prefix: first part of every key (default ``"chatlayers"``); must not hold ``{`` or
            ``}`` (they would change the hash tag). Overrides the URL's ``prefix``.
        ttl: seconds (or a ``timedelta``) after the last write at which a conversation
            expires; refreshed by every save. ``None`` (default): never.
        cluster: use ``redis.asyncio.cluster.RedisCluster`` (the URL names any one node).
            Overrides the URL's ``cluster``.
        **client_options: passed to ``Redis.from_url`` / ``RedisCluster.from_url``.

    Raises:
        ConfigError: redis-py is not installed (``pip install 'chatlayers[redis]'``), or the
            URL or an option is invalid.
    """

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str | None = None,
        ttl: float | timedelta | None = None,
        cluster: bool | None = None,
        **client_options: Any,
    ) -> None:
        try:
            import redis.asyncio
            import redis.asyncio.cluster
            import redis.exceptions
        except ImportError as exc:
            raise ConfigError(
                "RedisChatStorage needs redis-py: pip install 'chatlayers[redis]'"
            ) from exc
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://")):
            raise ConfigError(f"not a redis:// or rediss:// URL: {redact_url(str(url))!r}")
        driver_url, options = pop_query(url, _OWN_OPTIONS)
        self.url = redact_url(url)
        self._secrets = secrets_of_url(url)  # hidden in the driver's messages too
        if prefix is None:
            prefix = options.get("prefix", DEFAULT_PREFIX)
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            raise ConfigError(
                f"redis prefix must be a non-empty str without '{{' or '}}', got {prefix!r}"
            )
        self.prefix = prefix
        self._ttl = _ttl_ms(ttl if ttl is not None else options.get("ttl"))
        self.ttl = self._ttl / 1000 if self._ttl else None
        if cluster is None:
            cluster = _flag("cluster", options.get("cluster", "false"))
        self.cluster = bool(cluster)
        self._no_script = redis.exceptions.NoScriptError
        self._errors: tuple[type[BaseException], ...] = (
            redis.exceptions.RedisError,
            redis.exceptions.RedisClusterException,
            OSError,
        )
        try:
            if self.cluster:
                self._client: Redis | RedisCluster = redis.asyncio.cluster.RedisCluster.from_url(
                    driver_url, **client_options
                )
            else:
                self._client = redis.asyncio.Redis.from_url(driver_url, **client_options)
        except (ValueError, TypeError, redis.exceptions.RedisClusterException) as exc:
            raise ConfigError(f"bad redis URL or option for {self.url}: {exc}") from None
        self._init_lock = anyio.Lock()
        self._closed = False

    # ------------------------------------------------------------------ keys

    def _base(self, user: str, session: str) -> str:
        """``P:{U:S}:``, the start of every key of the session."""
        return f"{self.prefix}:{{{_part('user_id', user)}:{_part('session_id', session)}}}:"

    def _registry(self, user: str) -> str:
        return f"{self.prefix}:{{{_part('user_id', user)}}}:s"

    # ------------------------------------------------------------------ driver calls

    def _unavailable(self, exc: BaseException) -> StorageUnavailableError:
        detail = redact_text(f"{type(exc).__name__}: {exc}", self._secrets)
        return StorageUnavailableError(f"Redis at {self.url}: {detail}")

    async def _cluster_ready(self) -> None:
        """Discover the cluster's nodes once, before concurrent commands do it.

        redis-py's asyncio ``RedisCluster`` (8.1) fails with ``AttributeError`` on
        ``_writer`` when many tasks send their first commands while it initializes (or
        re-initializes after an error), so one task initializes under a lock first.
        """
        client = self._client
        if getattr(client, "_initialize", False):
            async with self._init_lock:
                if getattr(client, "_initialize", False):
                    await client.initialize()

    async def _eval(self, script: _Script, keys: list[str], args: list[Any]) -> Any:
        client = self._client
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args)
        except self._no_script:
            await client.script_load(script.source)
            return await client.evalsha(script.sha, len(keys), *keys, *args)

    async def _register(self, registry: str, session: str) -> None:
        client = self._client
        await client.sadd(registry, session)
        if self._ttl:
            await client.pexpire(registry, self._ttl)

    async def _save_single(
        self, registry: str, session: str, keys: list[str], args: list[Any]
    ) -> Any:
        # One round trip: the registration, then the script, in order on one connection.
        for attempt in (0, 1):
            pipe = self._client.pipeline(transaction=False)
            pipe.sadd(registry, session)
            if self._ttl:
                pipe.pexpire(registry, self._ttl)
            pipe.evalsha(_SAVE.sha, len(keys), *keys, *args)
            try:
                return (await pipe.execute())[-1]
            except self._no_script:
                if attempt:
                    raise
                await self._client.script_load(_SAVE.source)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _unregister_if_empty(self, registry: str, session: str, agents: str) -> None:
        """Drop an emptied session from the user's set, unless a concurrent save revived it."""
        client = self._client
        await client.srem(registry, session)
        if await client.exists(agents):
            await self._register(registry, session)

    # ------------------------------------------------------------------ protocol

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        """Store one message; ``[message]`` as stored, or ``[]`` for an already stored id.

        Raises:
            InvalidMessageError: the message breaks a rule; nothing is written.
            InvalidKeyError: a key part cannot be encoded as UTF-8.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        return await self.save_messages(key, [message])

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        """Store a batch atomically (one Lua script); return the newly stored messages.

        Raises:
            InvalidMessageError: a message breaks a rule; nothing is written.
            InvalidKeyError: a key part cannot be encoded as UTF-8.
            StorageUnavailableError: Redis cannot be reached (password redacted); the batch
                may or may not be stored, and retrying it is safe (ids make it idempotent).
        """
        batch = prepare_batch(messages)
        if not batch:
            return []
        base = self._base(key.user_id, key.session_id)
        agent = _part("agent_id", key.agent_id)
        keys = [f"{base}m:{agent}", f"{base}i:{agent}", f"{base}a", f"{base}n"]
        args: list[Any] = [self._ttl, agent]
        for message in batch:
            args.append(message.id)
            args.append(encode(message))
        registry = self._registry(key.user_id)
        session = _part("session_id", key.session_id)
        try:
            if self.cluster:
                await self._cluster_ready()
                await self._register(registry, session)
                fresh, stored = await self._eval(_SAVE, keys, args)
            else:
                fresh, stored = await self._save_single(registry, session, keys, args)
            if fresh:
                # A delete_user may have dropped the session from the set between the two.
                await self._register(registry, session)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return [batch[index - 1] for index in stored]

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        """The conversation, oldest first; with ``limit``, one ``LRANGE -limit -1``.

        Raises:
            ValueError: ``limit`` is negative.
            InvalidKeyError: a key part cannot be encoded as UTF-8.
            StorageUnavailableError: Redis cannot be reached (password redacted).
            CorruptRecordError: a stored entry cannot be decoded.
        """
        if limit is None:
            start = 0
        elif limit <= 0:
            if limit < 0:
                raise ValueError(f"limit must be >= 0 or None, got {limit}")
            return []
        else:
            start = -limit
        name = f"{self._base(key.user_id, key.session_id)}m:{_part('agent_id', key.agent_id)}"
        try:
            if self.cluster:
                await self._cluster_ready()
            rows = cast(list[bytes], await self._client.lrange(name, start, -1))
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        out = [decode(_record(raw)) for raw in rows]
        if limit is None:
            return out
        return drop_orphaned_results(out)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        """Every agent's messages of the session (one atomic script), by created_at then seq.

        Raises:
            InvalidKeyError: a part is empty, not a string, holds NUL or a lone surrogate.
            StorageUnavailableError: Redis cannot be reached (password redacted).
            CorruptRecordError: a stored entry cannot be decoded.
        """
        check_key_part("user_id", user_id)
        check_key_part("session_id", session_id)
        base = self._base(user_id, session_id)
        try:
            if self.cluster:
                await self._cluster_ready()
            reply = await self._eval(_FETCH_SESSION, [f"{base}a"], [base])
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        rows = []
        for n in range(0, len(reply), 2):
            agent_id = unquote(reply[n].decode("ascii"), errors="strict")
            for raw in reply[n + 1]:
                seq, record = _entry(raw)
                message = decode(record)
                rows.append((message.created_at, seq, agent_id, message))
        rows.sort(key=lambda row: (row[0], row[1]))
        return [AgentMessage(agent_id, message) for _, _, agent_id, message in rows]

    async def delete(self, key: ChatKey) -> None:
        """Erase one conversation (a no-op when it does not exist).

        Raises:
            InvalidKeyError: a key part cannot be encoded as UTF-8.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        base = self._base(key.user_id, key.session_id)
        agent = _part("agent_id", key.agent_id)
        keys = [f"{base}m:{agent}", f"{base}i:{agent}", f"{base}a", f"{base}n"]
        try:
            if self.cluster:
                await self._cluster_ready()
            if await self._eval(_DELETE, keys, [agent]):
                await self._unregister_if_empty(
                    self._registry(key.user_id), _part("session_id", key.session_id), keys[2]
                )
        except self._errors as exc:
            raise self._unavailable(exc) from exc

    async def delete_user(self, user_id: str) -> None:
        """Erase every conversation of the user: each session listed in ``P:{U}:s``.

        No pattern is used, so no other user's keys can match. Each session is erased
        atomically; sessions are erased one after the other (they live in different slots).

        Raises:
            InvalidKeyError: ``user_id`` is empty, not a string, holds NUL or a lone surrogate.
            StorageUnavailableError: Redis cannot be reached (password redacted); sessions
                erased before the failure stay erased and a retry erases the rest.
        """
        check_key_part("user_id", user_id)
        registry = self._registry(user_id)
        user = _part("user_id", user_id)
        try:
            if self.cluster:
                await self._cluster_ready()
            sessions = cast(set[bytes], await self._client.smembers(registry))
            for raw in sessions:
                session = raw.decode("ascii")
                base = f"{self.prefix}:{{{user}:{session}}}:"
                await self._eval(_DELETE_SESSION, [f"{base}a", f"{base}n"], [base])
                await self._unregister_if_empty(registry, session, f"{base}a")
        except self._errors as exc:
            raise self._unavailable(exc) from exc

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """Every key holding at least one message, sorted by (user_id, session_id, agent_id).

        With ``user_id``, reads that user's session set; without, finds the users' session
        sets with ``SCAN MATCH P:{*}:s`` (the prefix matched literally), on every node of a
        cluster. Meant for export and statistics, not for a hot path.

        Raises:
            InvalidKeyError: a filter is not a valid key part.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        registries: list[tuple[str, str]] = []
        if user_id is not None:
            check_key_part("user_id", user_id)
            registries.append((self._registry(user_id), _part("user_id", user_id)))
        wanted = None
        if session_id is not None:
            check_key_part("session_id", session_id)
            wanted = _part("session_id", session_id)
        keys: list[ChatKey] = []
        try:
            if self.cluster:
                await self._cluster_ready()
            if user_id is None:
                pattern = f"{_glob_escape(self.prefix)}:{{*}}:s"
                start = len(self.prefix) + 2
                async for raw in self._client.scan_iter(match=pattern, count=1000, _type="set"):
                    name = raw.decode("ascii")
                    registries.append((name, name[start:-3]))
            for registry, user in registries:
                sessions = cast(set[bytes], await self._client.smembers(registry))
                for raw in sessions:
                    session = raw.decode("ascii")
                    if wanted is not None and session != wanted:
                        continue
                    base = f"{self.prefix}:{{{user}:{session}}}:"
                    agents = await self._eval(_LIST_AGENTS, [f"{base}a"], [base])
                    for agent in agents:
                        keys.append(
                            ChatKey(
                                unquote(user, errors="strict"),
                                unquote(session, errors="strict"),
                                unquote(agent.decode("ascii"), errors="strict"),
                            )
                        )
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        keys.sort(key=lambda k: (k.user_id, k.session_id, k.agent_id))
        return keys

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent.

        Raises:
            StorageUnavailableError: closing failed (password redacted).
        """
        if self._closed:
            return
        self._closed = True
        try:
            await self._client.aclose()
        except self._errors as exc:
            raise self._unavailable(exc) from exc

    def describe(self) -> str:
        extra = f", ttl={self.ttl:g}s" if self.ttl else ""
        kind = ", cluster" if self.cluster else ""
        return f"{self.url} (prefix={self.prefix!r}{extra}{kind})"

    def __repr__(self) -> str:
        return f"RedisChatStorage({self.describe()})"
