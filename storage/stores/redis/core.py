"""The Redis store's construction, its ``ChatStorage`` hooks and the user's session index.

See :mod:`storage.stores.redis` for the layout and the guarantees.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Annotated, Any, Final, Self, TypeAlias, cast
from urllib.parse import parse_qsl, urlsplit

from storage.checked import Check
from storage.codec import decode, encode
from storage.durations import parse_positive_duration
from storage.errors import (
    ChatStorageError,
    ConfigError,
    ConflictError,
    InvalidArgumentError,
    StorageUnavailableError,
)
from storage.history import drop_orphaned_results
from storage.message import ChatKey, ChatMessage
from storage.redact import redact_text, redact_url, secrets_of_options, secrets_of_url
from storage.stores.base import BaseStore, SessionRow
from storage.stores.redis import scripts
from storage.stores.redis.client import (
    ClosedError,
    ScriptClient,
    driver_keywords,
    driver_query_names,
    import_driver,
)
from storage.stores.redis.layout import (
    Layout,
    decode_part,
    entries,
    entry,
    known_part,
    part,
    to_us,
)
from storage.stores.urls import check_query, drop_query

__all__ = ["DEFAULT_PREFIX", "RedisCore"]

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


#: The ``ttl`` option: a duration > 0, or ``""`` for none (config checks it with the others).
TTL: TypeAlias = Annotated[float | timedelta | str, Check(_ttl_ms)]


def new_epoch() -> str:
    return uuid.uuid4().hex[:16]


def message_args(batch: Sequence[ChatMessage]) -> list[Any]:
    """``(id, record, created_at µs)`` per message, for the save and replace scripts."""
    args: list[Any] = []
    for message in batch:
        assert message.created_at is not None  # prepare_batch sets it
        args += [message.id, encode(message), to_us(message.created_at)]
    return args


class RedisCore(BaseStore):
    """Construction, the ``ChatStorage`` hooks and the index of the Redis store.

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
        ConfigError: redis-py is not installed (``pip install 'chatlayers[redis]'``), or the
            URL or an option is invalid.
        TypeError: a keyword option neither this store nor redis-py takes.
    """

    scheme = "redis"

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str | None = None,
        ttl: TTL | None = None,
        cluster: bool | None = None,
        clock: Callable[[], float] | None = None,
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
        if prefix is None:
            prefix = query.get("prefix", DEFAULT_PREFIX)
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            raise ConfigError(
                f"redis prefix must be a non-empty str without '{{' or '}}', got {prefix!r}"
            )
        self.prefix = prefix
        self.layout = Layout(prefix)
        try:
            self._ttl = _ttl_ms(ttl if ttl is not None else query.get("ttl"))
        except InvalidArgumentError as exc:
            raise ConfigError(f"redis ttl: {exc}") from exc
        self.ttl = self._ttl / 1000 if self._ttl else None
        if cluster is None:
            cluster = _flag("cluster", query.get("cluster", "false"))
        self.cluster = bool(cluster)
        unknown = set(client_options) - driver_keywords(redis, cluster=self.cluster)
        if unknown:
            raise TypeError(f"RedisChatStorage got unexpected keyword options {sorted(unknown)}")
        if clock is not None and not callable(clock):
            raise ConfigError(f"redis clock must be a callable returning seconds, got {clock!r}")
        self.clock = clock
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

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """Build the store from ``redis://…`` (or ``rediss://``) and typed options.

        ``prefix``, ``ttl`` and ``cluster`` come from ``options`` when given there, else from
        the URL's query; the driver's query options stay in the URL given to redis-py.

        Raises:
            ConfigError: not a Redis URL, an unknown query option, or a bad option value.
        """
        return cls(url, **options)

    @property
    def _client(self) -> Any:
        """The redis-py client (for tests and tools; the store goes through ``_redis``)."""
        return self._redis.client

    # --- BaseStore -----------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> StorageUnavailableError:
        detail = redact_text(f"{type(exc).__name__}: {exc}", self._secrets)
        return StorageUnavailableError(f"Redis at {self.url}: {detail}")

    def _describe_options(self) -> str:
        extra = f", ttl={self.ttl:.12g}s" if self.ttl else ""
        kind = ", cluster" if self.cluster else ""
        return f"prefix={self.prefix!r}{extra}{kind}"

    def __repr__(self) -> str:
        return f"RedisChatStorage({self.describe()})"

    # --- the user's session index --------------------------------------------------------

    def _index_keys(self, user_id: str) -> list[str]:
        """The index keys a session script updates itself: on a single server only."""
        return [] if self.cluster else list(self.layout.index(user_id))

    async def _register(self, user_id: str, member: str, score: int) -> None:
        """Before a Cluster write that may create a session: list it if it is not (a crash
        after this leaves an entry for an empty session, never unlisted data)."""
        if self.cluster:
            await self._redis.eval(
                scripts.INDEX, self.layout.index(user_id), [member, 0, score, 1, self._ttl]
            )

    async def _reindex(
        self, user_id: str, member: str, version: int, score: int, exists: bool
    ) -> None:
        """After a Cluster write: show the session's state of ``version`` unless the index
        shows a newer one already (so updates arriving in any order converge)."""
        if self.cluster and version:
            await self._redis.eval(
                scripts.INDEX,
                self.layout.index(user_id),
                [member, version, score, 1 if exists else 0, self._ttl],
            )

    async def _members(self, user_id: str) -> list[str]:
        """The encoded session ids in the user's index (a member this store did not write is
        skipped, counted in ``corrupt_derived``)."""
        client = await self._redis.ready()
        x, _ = self.layout.index(user_id)
        raw = cast(list[bytes], await client.zrange(x, 0, -1))
        members = []
        for m in raw:
            if known_part(m) is None:
                self._derived_unusable("session index", f"user {user_id!r}", f"member {m!r}")
                continue
            members.append(m.decode("ascii"))
        return members

    # --- writes --------------------------------------------------------------------------

    async def _save_batch(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str
    ) -> list[ChatMessage]:
        names = self.layout.key(key)
        keys = [
            names.messages,
            names.ids,
            names.head,
            names.agents,
            names.session,
            names.checkpoint,
            names.records,
            *self._index_keys(key.user_id),
        ]
        args = [self._ttl, names.agent, new_epoch(), expected_version, names.member, names.base]
        args += message_args(batch)
        newest = max(to_us(m.created_at) for m in batch if m.created_at is not None)
        await self._register(key.user_id, names.member, newest)
        reply = await self._redis.eval(scripts.SAVE, keys, args)
        if reply[0] == 1:
            raise ConflictError(
                f"{key}: the conversation changed since version {expected_version!r}; "
                "nothing stored"
            )
        _, stored, version, score, rebuilt = reply
        if version:
            await self._reindex(key.user_id, names.member, int(version), int(score), True)
        if rebuilt:
            self._derived_unusable("head", key, "a lost or unreadable head or session counter")
            await self._repair_head(key)
        return [batch[index - 1] for index in stored]

    async def _repair_head(self, key: ChatKey) -> None:
        """Rebuild the key's head from its list (a new epoch: its checkpoint is void), when
        it was lost or does not parse; the entries are the truth."""
        names = self.layout.key(key)
        for _ in range(3):
            joined = await self._redis.eval(scripts.FETCH, [names.messages], [0])
            rows = entries(joined)
            last = entry(rows[-1])[0] if rows else 0
            times: list[int] = []
            for raw in rows:
                try:
                    at = decode(entry(raw)[1]).created_at
                except ChatStorageError:  # the raw record's own damage: its time unknown
                    continue
                if at is not None:
                    times.append(to_us(at))
            first, newest = (min(times), max(times)) if times else (0, 0)
            done = await self._redis.eval(
                scripts.REPAIR_HEAD,
                [names.messages, names.head, names.checkpoint, names.session],
                [len(rows), new_epoch(), last, len(rows), first, newest, names.agents, names.base],
            )
            if done:
                return

    async def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        return await self._save_batch(key, batch, "")

    async def _delete(self, key: ChatKey) -> None:
        names = self.layout.key(key)
        keys = [
            names.messages,
            names.ids,
            names.head,
            names.checkpoint,
            names.records,
            names.lease,
            names.agents,
            names.session,
            *self._index_keys(key.user_id),
        ]
        version, score, exists = await self._redis.eval(
            scripts.DELETE, keys, [names.agent, names.base, names.member, self._ttl]
        )
        await self._reindex(key.user_id, names.member, int(version), int(score), bool(exists))

    async def _delete_user(self, user_id: str) -> None:
        encoded_user = part("user_id", user_id)
        # The layout before the index kept a user's sessions in the SET "P:{U}:s": erase
        # those too, so data written by an older release is never left behind.
        legacy = f"{self.prefix}:{{{encoded_user}}}:s"
        client = await self._redis.ready()
        old = {m.decode("ascii") for m in cast(set[bytes], await client.smembers(legacy))}
        for member in sorted(set(await self._members(user_id)) | old):
            base = self.layout.base(encoded_user, member)
            version = await self._redis.eval(
                scripts.DELETE_SESSION,
                [f"{base}a", f"{base}s", *self._index_keys(user_id)],
                [base, member, self._ttl],
            )
            await self._reindex(user_id, member, int(version), 0, False)
        if old:
            await client.delete(legacy)

    # --- reads ---------------------------------------------------------------------------

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        names = self.layout.key(key)
        joined = await self._redis.eval(scripts.FETCH, [names.messages], [-limit if limit else 0])
        out = [decode(entry(raw)[1]) for raw in entries(joined)]
        return out if limit is None else drop_orphaned_results(out)

    async def _session_entries(self, user_id: str, member: str) -> list[tuple[str, list[bytes]]]:
        """``(agent_id, list entries)`` of every agent of one session (one atomic read)."""
        base = self.layout.base(part("user_id", user_id), member)
        reply = await self._redis.eval(scripts.FETCH_SESSION, [f"{base}a"], [base])
        out = []
        for n in range(0, len(reply), 2):
            agent = known_part(reply[n])
            if agent is None:  # a damaged member of the session's agents set
                self._derived_unusable("session agents", f"session {member!r}", reply[n])
                continue
            out.append((agent, entries(reply[n + 1])))
        return out

    async def _session_rows(self, user_id: str, session_id: str) -> Iterable[SessionRow]:
        _, member = self.layout.session_base(user_id, session_id)
        rows: list[SessionRow] = []
        for agent_id, rows_of_agent in await self._session_entries(user_id, member):
            for raw in rows_of_agent:
                seq, record = entry(raw)
                message = decode(record)
                assert message.created_at is not None
                rows.append((message.created_at, seq, agent_id, message))
        return rows

    async def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        users: list[str] = []  # encoded
        if user_id is not None:
            users.append(part("user_id", user_id))
        else:
            client = await self._redis.ready()
            async for raw in client.scan_iter(
                match=self.layout.index_pattern(), count=1000, _type="zset"
            ):
                users.append(self.layout.user_of_index(raw.decode("ascii")))
        wanted = None
        if session_id is not None:
            wanted = part("session_id", session_id)
        client = await self._redis.ready()
        keys: list[ChatKey] = []
        for user in users:
            x = f"{self.prefix}:{{{user}}}:x"
            for raw_member in cast(list[bytes], await client.zrange(x, 0, -1)):
                if known_part(raw_member) is None:
                    self._derived_unusable("session index", f"user {user!r}", raw_member)
                    continue
                member = raw_member.decode("ascii")
                if wanted is not None and member != wanted:
                    continue
                base = self.layout.base(user, member)
                agents = await self._redis.eval(scripts.LIST_AGENTS, [f"{base}a"], [base])
                session = known_part(member)
                for agent in agents:
                    agent_id = known_part(agent)
                    if session is None or agent_id is None:
                        self._derived_unusable("session agents", f"session {member!r}", agent)
                        continue
                    keys.append(ChatKey(decode_part(user), session, agent_id))
        return keys

    async def _close(self) -> None:
        await self._redis.aclose()
