"""Erasure on Redis: after delete / delete_user no key on the server holds the erased text.

Every key of every node is read back (SCAN, then DUMP and a type-aware read of each value,
since DUMP may compress long strings), and the erased text must appear nowhere: not in
messages, checkpoints, records, leases, the session index or key names. The append-only
file keeps the text until it is rewritten (the documented caveat); BGREWRITEAOF removes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage, utc_now
from storage.stores.redis import RedisChatStorage
from tests.servers import RedisCluster, RedisServer

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.redis


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _raw(value: object) -> bytes:
    """A reply of a client that does not decode responses: bytes."""
    assert isinstance(value, bytes), value
    return value


def _values(client: redis.Redis) -> Iterator[tuple[bytes, bytes]]:
    """``(key name, everything readable of its value)`` for every key of one server."""
    for name in client.scan_iter(count=1000):
        kind = _raw(client.type(name)).decode()
        parts: list[bytes] = [client.dump(name) or b""]
        if kind == "string":
            parts.append(_raw(client.get(name) or b""))
        elif kind == "list":
            parts += [_raw(v) for v in client.lrange(name, 0, -1)]
        elif kind == "set":
            parts += [_raw(v) for v in client.smembers(name)]
        elif kind == "zset":
            parts += [_raw(v) for v in client.zrange(name, 0, -1)]
        elif kind == "hash":
            for field, value in client.hgetall(name).items():
                parts += [_raw(field), _raw(value)]
        yield name, b"\n".join(parts)


def _holding(clients: list[redis.Redis], needles: list[str]) -> list[str]:
    found = []
    for client in clients:
        for name, value in _values(client):
            for needle in needles:
                if needle.encode() in value or needle.encode() in name:
                    found.append(f"{name!r} holds {needle!r}")
    return found


async def _write_everything(s: RedisChatStorage, user: str, secret: str) -> list[ChatKey]:
    """A conversation's text in every place the store keeps it."""
    keys = [ChatKey(user, f"session-{n}", f"agent-{n % 2}") for n in range(3)]
    for n, key in enumerate(keys):
        await s.save_messages(
            key,
            [
                ChatMessage("user", f"my secret is {secret} (message {n})"),
                ChatMessage("assistant", f"noted: {secret}"),
            ],
        )
        head = await s.head(key)
        checkpoint = SummaryCheckpoint(
            (
                ChatMessage(
                    "system", f"summary: {secret}", metadata={"chatlayers": {"summary": True}}
                ),
            ),
            head.last_seq,
            head.epoch,
            "test",
            utc_now(),
        )
        assert await s.save_checkpoint(key, checkpoint, expected_version=0) is not None
        await s.save_record(key, ConversationRecord("note", {"text": secret}))
        assert await s.acquire_lease(key, f"worker-{secret}", 60)
    assert len(await s.search(user, secret)) == 6
    assert len((await s.list_sessions(user)).sessions) == 3
    return keys


@pytest.fixture(params=["single", "cluster"])
def target(request: pytest.FixtureRequest) -> tuple[str, bool, list[redis.Redis]]:
    if request.param == "single":
        server: RedisServer = request.getfixturevalue("redis_server")
        clients = [redis.Redis(host="127.0.0.1", port=server.port)]
        return server.url, False, clients
    cluster: RedisCluster = request.getfixturevalue("redis_cluster")
    clients = [redis.Redis(host="127.0.0.1", port=node.port) for node in cluster.nodes]
    return cluster.url, True, clients


@pytest.mark.anyio
async def test_delete_user_leaves_no_key_holding_the_text(
    target: tuple[str, bool, list[redis.Redis]],
) -> None:
    url, cluster, clients = target
    secret = f"s3cr3t{uuid.uuid4().hex}"
    user = f"user-{uuid.uuid4().hex}"
    async with RedisChatStorage(url, prefix=f"erase-{uuid.uuid4().hex[:8]}", cluster=cluster) as s:
        kept = ChatKey("kept-user", "s", "a")
        await s.save(kept, ChatMessage("user", "kept text"))
        await _write_everything(s, user, secret)
        assert _holding(clients, [secret, user])  # the scan sees them
        await s.delete_user(user)
        assert _holding(clients, [secret, user]) == []
        assert [m.text for m in await s.fetch(kept)] == ["kept text"]


@pytest.mark.anyio
async def test_delete_leaves_no_key_holding_the_text(
    target: tuple[str, bool, list[redis.Redis]],
) -> None:
    url, cluster, clients = target
    secret = f"s3cr3t{uuid.uuid4().hex}"
    other = f"other{uuid.uuid4().hex}"
    user = f"user-{uuid.uuid4().hex}"
    async with RedisChatStorage(url, prefix=f"erase-{uuid.uuid4().hex[:8]}", cluster=cluster) as s:
        keys = await _write_everything(s, user, secret)
        await s.save(ChatKey(user, keys[0].session_id, "agent-x"), ChatMessage("user", other))
        for key in keys:
            await s.delete(key)
        assert _holding(clients, [secret]) == []
        # The session with another agent stays listed; the emptied ones are gone.
        sessions = (await s.list_sessions(user)).sessions
        assert [(x.session_id, x.agents) for x in sessions] == [(keys[0].session_id, ("agent-x",))]
        assert _holding(clients, [other])
        await s.delete_user(user)
        assert _holding(clients, [other, user]) == []


@pytest.mark.anyio
async def test_aof_keeps_erased_text_until_rewritten(
    redis_server_factory: type[RedisServer], tmp_path: Path
) -> None:
    """The documented caveat: the append-only file holds erased text until BGREWRITEAOF."""
    server = redis_server_factory(tmp_path / "aof")
    server.start()
    secret = f"aof-secret-{uuid.uuid4().hex}"
    async with RedisChatStorage(server.url, prefix="aof") as s:
        await s.save(ChatKey("u", "s", "a"), ChatMessage("user", secret))
        await s.delete_user("u")
        client = s._client
        await client.execute_command("CONFIG", "SET", "appendfsync", "always")
        await s.save(ChatKey("v", "s", "a"), ChatMessage("user", "flush"))

        def files_hold() -> bool:
            return any(
                secret.encode() in p.read_bytes()
                for p in tmp_path.joinpath("aof").rglob("*")
                if p.is_file()
            )

        assert files_hold()
        await client.bgrewriteaof()
        for _ in range(2000):  # bounded: wait for the rewrite to finish
            info = await client.info("persistence")
            if (
                not info["aof_rewrite_in_progress"]
                and not info["aof_rewrite_scheduled"]
                and not files_hold()
            ):
                break
            await client.ping()
        assert not files_hold()
