"""RedisChatStorage on a real redis-server and a real 3-node Redis Cluster (tests/servers.py).

The protocol's semantics are checked by the conformance suite ("redis", "redis-cluster"
stacks) and here against the in-memory store; this module checks the Redis layout (escaping,
hash tags, no pattern commands, TTL), the key registry under concurrent deletes, faults and
concurrent writers.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from redis.crc import key_slot

pytest.register_assert_rewrite("tests.server_scenarios", "tests.servers")

from storage.errors import (  # noqa: E402
    ConfigError,
    CorruptRecordError,
    InvalidArgumentError,
    InvalidKeyError,
    StorageUnavailableError,
)
from storage.message import ChatKey, ChatMessage  # noqa: E402
from storage.redact import redact_url  # noqa: E402
from storage.stores.redis import RedisChatStorage  # noqa: E402
from tests.server_scenarios import (  # noqa: E402
    check_concurrent_result,
    kill_mid_run,
    operations,
    run_writers,
    same_as_memory,
    writer_processes,
)
from tests.servers import RedisCluster, RedisServer, free_port  # noqa: E402

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.redis

WEIRD = ChatKey("user:*?[x]{y}", "sess}{:*", "agent[0]*")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's asyncio client


def _prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisChatStorage]:
    async with RedisChatStorage(redis_url, prefix=_prefix()) as s:
        yield s


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _keys(client: redis.Redis, prefix: str) -> list[str]:
    """The prefix's keys holding conversation data (not the format marker ``P:format``)."""
    # Inspection only (the store itself never scans).
    found = (k.decode() for k in client.scan_iter(match=f"{prefix}:*", count=1000))
    return sorted(k for k in found if k != f"{prefix}:format")


def _index(client: redis.Redis, key: str) -> set[str]:
    """The sessions of a user's index (a sorted set)."""
    return {_text(m) for m in client.zrange(key, 0, -1)}


def _text(member: object) -> str:
    """A sorted-set member as text (bytes unless the client decodes responses)."""
    if isinstance(member, bytes):
        return member.decode()
    assert isinstance(member, str), member
    return member


def _cluster_keys(cluster: RedisCluster, prefix: str) -> dict[int, list[str]]:
    out = {}
    for node in cluster.nodes:
        client = redis.Redis(host="127.0.0.1", port=node.port)
        found = (k.decode() for k in client.scan_iter(match=f"{prefix}:*"))
        out[node.port] = sorted(k for k in found if k != f"{prefix}:format")
        client.close()
    return out


# --------------------------------------------------------------------------- semantics


@pytest.mark.anyio
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations())
async def test_same_results_as_memory_store(redis_url: str, ops: list[tuple[object, ...]]) -> None:
    async with RedisChatStorage(redis_url, prefix="differential") as s:
        await same_as_memory(s, ops, uuid.uuid4().hex[:8])


@pytest.mark.anyio
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations())
async def test_cluster_same_results_as_memory_store(
    redis_cluster_url: str, ops: list[tuple[object, ...]]
) -> None:
    async with RedisChatStorage(redis_cluster_url, prefix="differential", cluster=True) as s:
        await same_as_memory(s, ops, uuid.uuid4().hex[:8])


# --------------------------------------------------------------------------- layout


@pytest.mark.anyio
async def test_layout_escapes_parts_and_shares_one_hash_tag(
    store: RedisChatStorage, raw: redis.Redis
) -> None:
    await store.save(WEIRD, ChatMessage("user", "hi"))
    keys = _keys(raw, store.prefix)
    session_keys = [k for k in keys if not k.endswith(("}:x", "}:y"))]
    assert len(session_keys) == 5  # list, ids, head, agents, session
    assert len({key_slot(k.encode()) for k in session_keys}) == 1
    for k in keys:
        rest = k[len(store.prefix) + 1 :]
        assert not set("*?[]") & set(rest), k
        assert rest.count("{") == 1, k
        assert rest.count("}") == 1, k
    registry = [k for k in keys if k.endswith("}:x")]
    assert len(registry) == 1
    assert _index(raw, registry[0]) == {"sess%7D%7B%3A%2A"}


@pytest.mark.anyio
async def test_parts_that_look_alike_never_collide(store: RedisChatStorage) -> None:
    keys = [
        ChatKey("a:b", "c", "d"),
        ChatKey("a", "b:c", "d"),
        ChatKey("a", "b", "c:d"),
        ChatKey("a", "b", "c%3Ad"),
        ChatKey("a}:{b", "c", "d"),
        ChatKey("*", "*", "*"),
        ChatKey("a", "*", "d"),
        ChatKey("[a]", "?", "d"),
    ]
    for n, key in enumerate(keys):
        await store.save(key, ChatMessage("user", str(n)))
    for n, key in enumerate(keys):
        assert [m.text for m in await store.fetch(key)] == [str(n)]
    await store.delete_user("*")
    await store.delete(ChatKey("a", "b", "c:d"))
    remaining = [m.text for key in keys for m in await store.fetch(key)]
    assert remaining == ["0", "1", "3", "4", "6", "7"]
    chats = await store.fetch_all_chats("a", "b")
    assert [(c.agent_id, c.message.text) for c in chats] == [("c%3Ad", "3")]


@pytest.mark.anyio
async def test_no_pattern_commands(redis_server: RedisServer, raw: redis.Redis) -> None:
    """A Redis user without KEYS and SCAN can do everything: the store never scans."""
    password = "no-scan-pw"
    raw.acl_setuser(
        "chat",
        enabled=True,
        passwords=[f"+{password}"],
        keys=["*"],
        commands=["+@all", "-keys", "-scan"],
    )
    url = f"redis://chat:{password}@127.0.0.1:{redis_server.port}/0"
    async with RedisChatStorage(url, prefix=_prefix()) as s:
        with pytest.raises(redis.exceptions.NoPermissionError):
            await s._client.keys("*")  # the restriction is real
        key = ChatKey("u", "s", "a")
        await s.save_messages(key, [ChatMessage("user", "1"), ChatMessage("assistant", "2")])
        await s.save(ChatKey("u", "s2", "b"), ChatMessage("user", "3"))
        assert len(await s.fetch(key, limit=1)) == 1
        assert len(await s.fetch_all_chats("u", "s")) == 2
        await s.delete(key)
        await s.delete_user("u")
        assert await s.fetch(ChatKey("u", "s2", "b")) == []
        assert _keys(raw, s.prefix) == []


@pytest.mark.anyio
async def test_delete_user_removes_every_key(store: RedisChatStorage, raw: redis.Redis) -> None:
    for session in ("s1", "s{2}", "s:3"):
        for agent in ("a", "b"):
            await store.save(ChatKey("gone", session, agent), ChatMessage("user", "x"))
    await store.save(ChatKey("kept", "s1", "a"), ChatMessage("user", "y"))
    await store.delete(ChatKey("gone", "s1", "a"))
    await store.delete(ChatKey("gone", "s1", "b"))  # session s1 now empty: unregistered
    registry = f"{store.prefix}:{{gone}}:x"
    assert _index(raw, registry) == {"s%3A3", "s%7B2%7D"}
    await store.delete_user("gone")
    assert all("{kept" in k for k in _keys(raw, store.prefix))
    assert len(_keys(raw, store.prefix)) == 7  # 5 of the session, the user's index (2)
    assert [m.text for m in await store.fetch(ChatKey("kept", "s1", "a"))] == ["y"]


@pytest.mark.anyio
async def test_registry_lists_every_session_despite_concurrent_deletes(
    store: RedisChatStorage, raw: redis.Redis
) -> None:
    """Saves racing delete_user and delete: afterwards every session holding data is in the
    user's set, so a final delete_user leaves nothing behind."""

    async def saver(n: int) -> None:
        for i in range(40):
            await store.save(
                ChatKey("racer", f"s{(n + i) % 6}", f"a{n % 3}"), ChatMessage("user", f"{n}-{i}")
            )

    async def deleter() -> None:
        for i in range(25):
            await store.delete_user("racer")
            await store.delete(ChatKey("racer", f"s{i % 6}", "a0"))

    async with anyio.create_task_group() as tg:
        for n in range(6):
            tg.start_soon(saver, n)
        tg.start_soon(deleter)
    registered = _index(raw, f"{store.prefix}:{{racer}}:x")
    with_data = {
        k.split("{racer:")[1].split("}")[0] for k in _keys(raw, store.prefix) if "{racer:" in k
    }
    assert with_data <= registered
    await store.delete_user("racer")
    assert _keys(raw, store.prefix) == []


@pytest.mark.anyio
async def test_list_keys_matches_its_prefix_literally(redis_url: str, raw: redis.Redis) -> None:
    base = _prefix()
    async with (
        RedisChatStorage(redis_url, prefix=f"{base}*") as star,
        RedisChatStorage(redis_url, prefix=f"{base}x") as other,
    ):
        await other.save(ChatKey("u", "s", "a"), ChatMessage("user", "other store"))
        mine = [ChatKey("u:*", "s{1}", "a?"), ChatKey("u:*", "s{1}", "b"), ChatKey("v", "s", "a")]
        for key in mine:
            await star.save(key, ChatMessage("user", "x"))
        assert await star.list_keys() == mine
        assert await star.list_keys(session_id="s{1}") == mine[:2]
        assert await star.list_keys(user_id="v") == mine[2:]
        assert await star.list_keys(user_id="u") == []
        # A list expired by its TTL before the session's agents set is not listed.
        (expired,) = [k for k in _keys(raw, f"{base}\\*") if k.endswith(":m:b")]
        raw.delete(expired)
        assert await star.list_keys(user_id="u:*") == mine[:1]
        assert await other.list_keys() == [ChatKey("u", "s", "a")]


@pytest.mark.anyio
async def test_ttl_is_set_and_refreshed_on_write(redis_url: str, raw: redis.Redis) -> None:
    async with RedisChatStorage(redis_url, prefix=_prefix(), ttl=timedelta(seconds=100)) as s:
        key = ChatKey("u", "s", "a")
        await s.save(key, ChatMessage("user", "1"))
        keys = _keys(raw, s.prefix)
        assert len(keys) == 7  # 5 of the session, the user's index (2)
        assert all(0 < raw.pttl(k) <= 100_000 for k in keys)
        for k in keys:
            raw.pexpire(k, 5_000)
        await s.save(key, ChatMessage("user", "2"))
        assert all(raw.pttl(k) > 50_000 for k in keys)
    async with RedisChatStorage(redis_url, prefix=_prefix()) as s:
        await s.save(ChatKey("u", "s", "a"), ChatMessage("user", "1"))
        assert all(raw.pttl(k) == -1 for k in _keys(raw, s.prefix))


@pytest.mark.anyio
async def test_scripts_reload_after_script_flush(store: RedisChatStorage, raw: redis.Redis) -> None:
    key = ChatKey("u", "s", "a")
    await store.save(key, ChatMessage("user", "1"))
    raw.script_flush()
    assert len(await store.save(key, ChatMessage("user", "2"))) == 1
    raw.script_flush()
    assert len(await store.fetch_all_chats("u", "s")) == 2
    raw.script_flush()
    await store.delete(key)
    raw.script_flush()
    await store.delete_user("u")
    assert _keys(raw, store.prefix) == []


@pytest.mark.anyio
async def test_corrupt_entry_raises(store: RedisChatStorage, raw: redis.Redis) -> None:
    key = ChatKey("u", "s", "a")
    await store.save(key, ChatMessage("user", "1"))
    (list_key,) = [k for k in _keys(raw, store.prefix) if ":m:" in k]
    raw.rpush(list_key, b"garbage-without-separator")
    with pytest.raises(CorruptRecordError):
        await store.fetch(key)
    raw.rpush(list_key, b"7 {not json")
    with pytest.raises(CorruptRecordError):
        await store.fetch(key, limit=1)


@pytest.mark.anyio
async def test_lone_surrogate_key_is_refused_before_writing(
    store: RedisChatStorage, raw: redis.Redis
) -> None:
    with pytest.raises(InvalidKeyError, match="surrogate"):
        await store.save(ChatKey("u\ud800", "s", "a"), ChatMessage("user", "x"))
    with pytest.raises(InvalidKeyError):
        await store.fetch_all_chats("u", "s\udfff")
    assert _keys(raw, store.prefix) == []


# --------------------------------------------------------------------------- cluster


@pytest.mark.anyio
async def test_cluster_spreads_sessions_and_keeps_each_in_one_slot(
    redis_cluster: RedisCluster,
) -> None:
    prefix = _prefix()
    url = f"{redis_cluster.url}?cluster=true&prefix={prefix}"
    async with RedisChatStorage(url) as s:
        assert s.cluster
        assert s.prefix == prefix
        for n in range(30):
            key = ChatKey("clustered", f"session-{n}", f"agent{n % 2}")
            await s.save_messages(key, [ChatMessage("user", "q"), ChatMessage("assistant", "a")])
        await s.save(ChatKey("other", "session-0", "agent0"), ChatMessage("user", "kept"))
        placed = _cluster_keys(redis_cluster, prefix)
        assert sum(1 for keys in placed.values() if keys) == 3  # every node holds data
        for keys in placed.values():
            for k in keys:
                if ":{clustered:" in k:
                    session_keys = [
                        x
                        for ks in placed.values()
                        for x in ks
                        if x.startswith(k.split("}")[0] + "}")
                    ]
                    assert len({key_slot(x.encode()) for x in session_keys}) == 1
        chats = await s.fetch_all_chats("clustered", "session-3")
        assert [c.message.text for c in chats] == ["q", "a"]
        await s.delete_user("clustered")
        left = [k for keys in _cluster_keys(redis_cluster, prefix).values() for k in keys]
        assert left
        assert all("{other" in k for k in left)
        assert [m.text for m in await s.fetch(ChatKey("other", "session-0", "agent0"))] == ["kept"]


@pytest.mark.anyio
async def test_save_racing_delete_user_leaves_nothing_unlisted(redis_cluster_url: str) -> None:
    """On a cluster the user's session set and the session are written in two steps; a
    delete_user landing between them must not leave the new data unlisted."""
    async with RedisChatStorage(redis_cluster_url, prefix=_prefix(), cluster=True) as s:
        register = s._ctx.register
        calls = 0

        async def register_then_race(user_id: str, member: str, score: int) -> None:
            nonlocal calls
            calls += 1
            await register(user_id, member, score)
            if calls == 1:
                await s.delete_user("u")  # between the registration and the write

        s._ctx.register = register_then_race  # type: ignore[method-assign]
        key = ChatKey("u", "s", "a")
        assert len(await s.save(key, ChatMessage("user", "x"))) == 1
        del s._ctx.register
        assert calls == 1
        await s.delete_user("u")
        assert await s.fetch(key) == []
        assert await s.fetch_all_chats("u", "s") == []


@pytest.mark.anyio
@pytest.mark.parametrize("cluster", [False, True])
async def test_save_racing_session_erase_leaves_nothing_unlisted(
    redis_url: str, redis_cluster_url: str, cluster: bool
) -> None:
    """A save that recreates a session right after delete_user erased it (before it updates
    the user's session set) stays listed, so the next delete_user erases it."""
    from storage.stores.redis import scripts
    from storage.stores.redis.lua import Script

    url = redis_cluster_url if cluster else redis_url
    async with RedisChatStorage(url, prefix=_prefix(), cluster=cluster) as s:
        key = ChatKey("u", "s", "a")
        await s.save(key, ChatMessage("user", "old"))
        run_script = s._redis.eval
        raced = False

        async def erase_then_race(script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
            nonlocal raced
            result = await run_script(script, keys, args)
            if script is scripts.DELETE_SESSION and not raced:
                raced = True
                await s.save(key, ChatMessage("user", "new"))
            return result

        s._redis.eval = erase_then_race  # type: ignore[method-assign]
        await s.delete_user("u")
        del s._redis.eval
        assert raced
        assert [m.text for m in await s.fetch(key)] == ["new"]
        await s.delete_user("u")
        assert await s.fetch(key) == []


@pytest.mark.anyio
async def test_cluster_concurrent_writers(redis_cluster_url: str) -> None:
    prefix = _prefix()
    stores = [RedisChatStorage(redis_cluster_url, prefix=prefix, cluster=True) for _ in range(2)]
    try:
        await run_writers(stores, range(20), 50, 5)
        await check_concurrent_result(stores[0], range(20), 50, 5)
    finally:
        for s in stores:
            await s.aclose()


# --------------------------------------------------------------------------- concurrency


@pytest.mark.anyio
async def test_concurrent_tasks_through_two_instances(redis_url: str) -> None:
    prefix = _prefix()
    stores = [RedisChatStorage(redis_url, prefix=prefix) for _ in range(2)]
    try:
        await run_writers(stores, range(20), 50, 5)
        await check_concurrent_result(stores[1], range(20), 50, 5)
    finally:
        for s in stores:
            await s.aclose()


@pytest.mark.anyio
async def test_concurrent_processes(redis_url: str) -> None:
    prefix = _prefix()
    await writer_processes("redis", redis_url, prefix, processes=2, tasks=10, per_task=50, keys=5)
    async with RedisChatStorage(redis_url, prefix=prefix) as s:
        await check_concurrent_result(s, range(20), 50, 5)


# --------------------------------------------------------------------------- faults


@pytest.mark.anyio
async def test_server_down_at_start_raises_unavailable_with_password_redacted() -> None:
    port = free_port()
    for cluster in (False, True):
        s = RedisChatStorage(f"redis://:hunter2secret@127.0.0.1:{port}/0", cluster=cluster)
        with pytest.raises(StorageUnavailableError) as info:
            await s.save(ChatKey("u", "s", "a"), ChatMessage("user", "x"))
        message = str(info.value)
        assert "hunter2secret" not in message
        assert f"redis://:***@127.0.0.1:{port}/0" in message
        assert info.value.__cause__ is not None
        assert "hunter2secret" not in repr(s)
        await s.aclose()


@pytest.mark.anyio
async def test_server_killed_mid_run_then_restarted(
    redis_server_factory: type[RedisServer], tmp_path: Path
) -> None:
    password = "s3cret-redis-pw"
    server = redis_server_factory(tmp_path / "faulty", password=password)
    server.start()
    async with RedisChatStorage(server.url, prefix="faults") as s:
        await kill_mid_run(s, server.kill, server.start, password, ChatKey("u", "s", "a"))


# --------------------------------------------------------------------------- config


def test_missing_server_binary_skips_outside_ci_and_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tests.servers as servers

    monkeypatch.setattr(servers, "_which", lambda name, extra_dirs=(): None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install redis-server"):
        servers.RedisServer(tmp_path)
    with pytest.raises(pytest.skip.Exception, match="apt-get install postgresql"):
        servers.PostgresServer()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        servers.RedisServer(tmp_path)
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        servers.PostgresServer()


def test_url_options_and_redaction() -> None:
    s = RedisChatStorage("redis://user:pw-secret@h:1/2?prefix=p1&ttl=2.5&socket_timeout=3")
    assert (s.prefix, s.ttl, s.cluster) == ("p1", 2.5, False)
    assert "pw-secret" not in s.describe()
    assert "pw-secret" not in repr(s)
    assert s.url == "redis://user:***@h:1/2?prefix=p1&ttl=2.5&socket_timeout=3"
    kwargs = cast(Any, s._client).connection_pool.connection_kwargs
    assert (kwargs["db"], kwargs["socket_timeout"], kwargs["password"]) == (2, 3.0, "pw-secret")
    assert RedisChatStorage("redis://h?prefix=p1", prefix="p2").prefix == "p2"
    tls = RedisChatStorage("rediss://h:6380/0")
    pool = cast(Any, tls._client).connection_pool
    assert pool.connection_class.__name__ == "SSLConnection"


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("http://h", {}),
        ("redis://h?ttl=-1", {}),
        ("redis://h?ttl=abc", {}),
        ("redis://h?prefix=a{b", {}),
        ("redis://h?cluster=maybe", {}),
        ("redis://h/1", {"cluster": True}),
        ("redis://h/0?socket_timeout=abc", {}),
    ],
)
def test_a_bad_url_raises_config_error(url: str, options: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        RedisChatStorage(url, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"prefix": "a{b"}, "prefix"),
        ({"prefix": ""}, "prefix"),
        ({"ttl": -1}, "duration"),
        ({"ttl": "abc"}, "duration"),
        ({"clock": 5}, "clock"),
    ],
)
def test_a_bad_option_raises_invalid_argument_error(options: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        RedisChatStorage("redis://h", **options)  # type: ignore[arg-type]


def test_from_url_keeps_driver_options_in_the_url_and_redacts() -> None:
    url = "redis://user:pw-secret@h:1/2?prefix=p1&ttl=30d&socket_timeout=3"
    s = RedisChatStorage.from_url(url, prefix="p2", cluster=False)
    assert (s.prefix, s.ttl, s.cluster) == ("p2", 30 * 86400, False)  # options win
    assert s.describe() == f"{redact_url(url)} (prefix='p2', ttl=30d)"
    assert "pw-secret" not in s.describe()
    kwargs = cast(Any, s._client).connection_pool.connection_kwargs
    assert (kwargs["db"], kwargs["socket_timeout"], kwargs["password"]) == (2, 3.0, "pw-secret")
    assert "prefix" not in kwargs
    with pytest.raises(ConfigError, match="did you mean 'prefix'"):
        RedisChatStorage.from_url("redis://h/0?prefx=p")
    with pytest.raises(ConfigError, match="did you mean 'socket_timeout'"):
        RedisChatStorage.from_url("redis://h/0?socket_timeot=3")
    hidden = RedisChatStorage.from_url("redis://h/0", password="kw-secret-value")
    assert "kw-secret-value" in hidden._secrets


@pytest.mark.anyio
async def test_delete_user_erases_data_of_the_previous_layout(
    store: RedisChatStorage, raw: redis.Redis
) -> None:
    """Sessions listed only in the old per-user SET (written by an older release) are
    erased by delete_user too."""
    p = store.prefix
    raw.sadd(f"{p}:{{old}}:s", "s1")
    raw.sadd(f"{p}:{{old:s1}}:a", "a")
    raw.rpush(f"{p}:{{old:s1}}:m:a", b'1 {"v":1,"id":"x","at":"2024-05-01T00:00:00+00:00"}')
    raw.sadd(f"{p}:{{old:s1}}:i:a", "x")
    raw.set(f"{p}:{{old:s1}}:n", 1)
    await store.delete_user("old")
    assert _keys(raw, p) == []


@pytest.mark.anyio
async def test_cluster_crash_between_write_and_index_update_leaves_data_listed(
    redis_cluster_url: str,
) -> None:
    """A worker dying after its session script but before its index update: the session was
    registered first, so it is listed (by its new message's time) and delete_user erases it."""
    async with RedisChatStorage(redis_cluster_url, prefix=_prefix(), cluster=True) as s:
        key = ChatKey("u", "s", "a")
        at = datetime(2024, 5, 1, tzinfo=UTC)

        async def crash(*args: object, **kwargs: object) -> None:
            raise StorageUnavailableError("worker died")

        s._ctx.reindex = crash  # type: ignore[method-assign]
        with pytest.raises(StorageUnavailableError):
            await s.save(key, ChatMessage("user", "x", created_at=at))
        del s._ctx.reindex
        (info,) = (await s.list_sessions("u")).sessions
        assert (info.session_id, info.message_count, info.last_at) == ("s", 1, at)
        await s.delete_user("u")
        assert await s.fetch(key) == []
        assert (await s.list_sessions("u")).sessions == ()
