"""Production shapes on Redis: two store instances writing at once, the server killed in the
middle (kill -9) and restarted on its append-only file.

While it is down every call, abilities included, raises StorageUnavailableError with the
password redacted; after the restart nothing acknowledged is lost, retried batches are
stored exactly once, and heads, checkpoints, records, leases and the session index are as
they were (the scripts are loaded again by the store).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.errors import StorageUnavailableError
from storage.message import ChatKey, ChatMessage, utc_now
from storage.stores.redis import RedisChatStorage
from tests.servers import RedisServer

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.redis

PASSWORD = "kill-me-pw-8f3a"
KEYS = [ChatKey("u", f"s{n}", "a") for n in range(3)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def turn(worker: int, t: int) -> list[ChatMessage]:
    return [
        ChatMessage("user" if i == 0 else "assistant", f"{worker}:{t}:{i}", id=f"{worker}-{t}-{i}")
        for i in range(4)
    ]


async def _raises_unavailable(call: Callable[[], Awaitable[Any]]) -> StorageUnavailableError:
    try:
        await call()
    except StorageUnavailableError as exc:
        return exc
    raise AssertionError("the call succeeded while the server was down")


@pytest.mark.anyio
async def test_two_instances_survive_a_server_restart(
    redis_server_factory: type[RedisServer], tmp_path: Path
) -> None:
    server = redis_server_factory(tmp_path / "restart", password=PASSWORD)
    server.start()
    async with (
        RedisChatStorage(server.url, prefix="faults") as a,
        RedisChatStorage(server.url, prefix="faults") as b,
    ):
        key = KEYS[0]
        await a.save_messages(key, turn(99, 0))
        head = await a.head(key)
        cp = SummaryCheckpoint(
            (ChatMessage("system", "summary", metadata={"chatlayers": {"summary": True}}),),
            head.last_seq,
            head.epoch,
            "test",
            utc_now(),
        )
        stored_cp = await b.save_checkpoint(key, cp, expected_version=0)
        record = await b.save_record(key, ConversationRecord("approval", {"ok": True}))
        assert await a.acquire_lease(key, "worker-a", 600)

        acknowledged: dict[ChatKey, list[str]] = {k: [] for k in KEYS}
        failed: list[tuple[ChatKey, list[ChatMessage], StorageUnavailableError]] = []
        enough = anyio.Event()
        count = 0

        async def writer(worker: int) -> None:
            nonlocal count
            store = (a, b)[worker % 2]
            k = KEYS[worker % len(KEYS)]
            for t in range(100_000):
                batch = turn(worker, t)
                try:
                    await store.save_messages(k, batch)
                except StorageUnavailableError as exc:
                    failed.append((k, batch, exc))
                    return
                acknowledged[k] += [m.id for m in batch]
                count += 1
                if count == 40:
                    enough.set()

        async with anyio.create_task_group() as tg:
            for worker in range(4):
                tg.start_soon(writer, worker)
            await enough.wait()
            await anyio.to_thread.run_sync(server.kill)
        assert len(failed) == 4
        for _, _, exc in failed:
            assert PASSWORD not in str(exc)
            assert ":***@" in str(exc)
            assert exc.__cause__ is not None

        # Down: every call fails the same way, password redacted.
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: a.fetch(key),
            lambda: a.head(key),
            lambda: a.fetch_since(key, 0),
            lambda: a.load_checkpoint(key),
            lambda: a.acquire_lease(key, "x", 1),
            lambda: a.list_sessions("u"),
            lambda: a.search("u", "hello"),
            lambda: a.fetch_records(key),
            lambda: b.replace(key, []),
            lambda: b.delete_user("u"),
            lambda: b.list_keys(),
        ]
        for call in calls:
            error = await _raises_unavailable(call)
            assert PASSWORD not in str(error)
            assert PASSWORD not in repr(error)

        await anyio.to_thread.run_sync(server.start)  # same port, same append-only file
        for k, batch, _ in failed:  # a failed batch may or may not have landed: retry it
            stored = await b.save_messages(k, batch)
            assert len(stored) in (0, 4)
            acknowledged[k] += [m.id for m in batch]
        for k in KEYS:
            ids = [m.id for m in await a.fetch(k)]
            extra = ["99-0-0", "99-0-1", "99-0-2", "99-0-3"] if k == key else []
            assert ids[: len(extra)] == extra
            assert sorted(ids) == sorted(extra + acknowledged[k])  # nothing lost, nothing twice
            # Turns stayed whole.
            for start in range(0, len(ids), 4):
                assert len({i.rsplit("-", 1)[0] for i in ids[start : start + 4]}) == 1
        assert await a.load_checkpoint(key) == stored_cp
        assert (await a.head(key)).checkpoint_version == 1
        assert await b.fetch_records(key) == [record]
        assert not await b.acquire_lease(key, "worker-b", 1)  # A's lease survived
        sessions = (await a.list_sessions("u")).sessions
        assert sorted(s.session_id for s in sessions) == ["s0", "s1", "s2"]
        assert (
            sum(s.message_count for s in sessions) == sum(len(v) for v in acknowledged.values()) + 4
        )


@pytest.mark.anyio
async def test_cluster_node_restart(tmp_path: Path) -> None:
    """A Cluster node killed mid-run: its sessions are unavailable (StorageUnavailableError),
    the other nodes' keep working, and after its restart nothing acknowledged is lost."""
    import redis as sync_redis
    from redis.crc import key_slot

    from tests.servers import RedisCluster

    cluster = RedisCluster(tmp_path / "cluster")
    try:
        cluster.start()
        async with RedisChatStorage(cluster.url, prefix="node", cluster=True) as s:
            keys = [ChatKey("u", f"s{n}", "a") for n in range(12)]
            for n, key in enumerate(keys):
                await s.save_messages(key, turn(n, 0))

            # The victim: a node holding some of the sessions but not the user's index (a
            # write also updates the index, so the index's node must be up for this user's
            # writes; sessions on the other nodes keep working).
            def holds(port: int, name: str) -> bool:
                client = sync_redis.Redis(host="127.0.0.1", port=port)
                try:
                    slot = key_slot(name.encode())
                    # redis-py leaves execute_command untyped
                    return bool(client.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))  # type: ignore[no-untyped-call]
                finally:
                    client.close()

            index = s.layout.index("u")[0]
            victim = next(n for n in cluster.nodes if not holds(n.port, index))
            on_victim = [k for k in keys if holds(victim.port, s.layout.key(k).messages)]
            assert on_victim
            assert len(on_victim) < len(keys)
            await anyio.to_thread.run_sync(victim.kill)
            with pytest.raises(StorageUnavailableError):
                await s.save_messages(on_victim[0], turn(99, 1))
            elsewhere = next(k for k in keys if k not in on_victim)
            assert len(await s.save_messages(elsewhere, turn(98, 1))) == 4
            await anyio.to_thread.run_sync(victim.start)
            for attempt in range(50):  # the client rediscovers the node (bounded)
                try:
                    await s.save_messages(on_victim[0], turn(99, 1))
                    break
                except StorageUnavailableError:
                    if attempt == 49:
                        raise
            for n, key in enumerate(keys):
                ids = [m.id for m in await s.fetch(key)]
                assert ids[:4] == [m.id for m in turn(n, 0)]
            assert [m.id for m in await s.fetch(on_victim[0])][4:] == [m.id for m in turn(99, 1)]
            assert len((await s.list_sessions("u")).sessions) == 12
    finally:
        cluster.stop()


def test_redis_under_trio_is_a_clear_error(redis_url: str) -> None:
    import anyio

    from storage.errors import ConfigError
    from storage.message import ChatKey
    from storage.stores.redis import RedisChatStorage

    async def main() -> None:
        store = RedisChatStorage(redis_url, prefix="trio-check")
        with pytest.raises(ConfigError, match="asyncio only"):
            await store.fetch(ChatKey("u", "s", "a"))

    anyio.run(main, backend="trio")
