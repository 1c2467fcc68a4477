"""Concurrent turns on Redis: 4-message turns stay contiguous, and a key's sequence order is its
commit order, so a reader tailing with ``fetch_since`` never skips a message.

Writers are tasks over two store instances and separate processes; the reader tails while
they write. On one server and on a 3-node Cluster.
"""

from __future__ import annotations

import sys
import uuid

import anyio
import pytest

from storage.message import ChatKey, ChatMessage
from storage.stores.redis import RedisChatStorage
from tests.paths import REPO

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.redis

ROOT = REPO
KEY = ChatKey("turns*user", "session:{1}", "agent")
TURN = 4

WRITER = """
import sys, anyio
from storage.message import ChatKey, ChatMessage
from storage.stores.redis import RedisChatStorage

url, prefix, worker = sys.argv[1], sys.argv[2], sys.argv[4]
cluster, turns = sys.argv[3] == "1", int(sys.argv[5])

async def main():
    async with RedisChatStorage(url, prefix=prefix, cluster=cluster) as s:
        key = ChatKey("turns*user", "session:{1}", "agent")
        for t in range(turns):
            batch = [
                ChatMessage(
                    "user" if i == 0 else "assistant", f"{worker}:{t}:{i}", id=f"{worker}-{t}-{i}"
                )
                for i in range(4)
            ]
            assert len(await s.save_messages(key, batch)) == 4

anyio.run(main)
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["single", "cluster"])
def url_and_cluster(request: pytest.FixtureRequest) -> tuple[str, bool]:
    if request.param == "single":
        return request.getfixturevalue("redis_url"), False
    return request.getfixturevalue("redis_cluster_url"), True


def turn(worker: str, t: int) -> list[ChatMessage]:
    return [
        ChatMessage("user" if i == 0 else "assistant", f"{worker}:{t}:{i}", id=f"{worker}-{t}-{i}")
        for i in range(TURN)
    ]


def check_contiguous(messages: list[ChatMessage], workers: list[str], turns: int) -> None:
    """Every turn whole, its messages adjacent and in order; each worker's turns in order."""
    assert len(messages) == len(workers) * turns * TURN
    assert len({m.id for m in messages}) == len(messages)
    next_turn = dict.fromkeys(workers, 0)
    for start in range(0, len(messages), TURN):
        block = [m.text.split(":") for m in messages[start : start + TURN]]
        worker, t = block[0][0], int(block[0][1])
        assert block == [[worker, str(t), str(i)] for i in range(TURN)], "a turn was split"
        assert t == next_turn[worker], "a worker's turns out of order"
        next_turn[worker] += 1


async def tail_until(store: RedisChatStorage, done: anyio.Event) -> list[tuple[int, str]]:
    """Tail the key by sequence number until ``done``, then read once more."""
    seen: list[tuple[int, str]] = []
    after = 0
    while True:
        finished = done.is_set()
        tail = await store.fetch_since(KEY, after)
        seen += [(seq, m.id) for seq, m in zip(tail.seqs, tail.messages, strict=True)]
        if tail.seqs:
            after = tail.seqs[-1]
        if finished:
            return seen
        await anyio.lowlevel.checkpoint()


@pytest.mark.anyio
async def test_concurrent_turns_through_two_instances(url_and_cluster: tuple[str, bool]) -> None:
    url, cluster = url_and_cluster
    prefix = f"turns-{uuid.uuid4().hex[:8]}"
    workers = ["w0", "w1", "w2", "w3"]
    turns = 25
    async with (
        RedisChatStorage(url, prefix=prefix, cluster=cluster) as a,
        RedisChatStorage(url, prefix=prefix, cluster=cluster) as b,
        RedisChatStorage(url, prefix=prefix, cluster=cluster) as reader,
    ):
        done = anyio.Event()
        seen: list[tuple[int, str]] = []

        async def write(worker: str, store: RedisChatStorage) -> None:
            for t in range(turns):
                assert len(await store.save_messages(KEY, turn(worker, t))) == TURN

        async def read() -> None:
            seen.extend(await tail_until(reader, done))

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            async with anyio.create_task_group() as writers:
                for n, worker in enumerate(workers):
                    writers.start_soon(write, worker, (a, b)[n % 2])
            done.set()
        messages = await reader.fetch(KEY)
        check_contiguous(messages, workers, turns)
        full = await reader.fetch_since(KEY, 0)
        assert list(full.seqs) == sorted(set(full.seqs))  # list order = sequence order
        assert seen == [(s, m.id) for s, m in zip(full.seqs, full.messages, strict=True)]


@pytest.mark.anyio
async def test_concurrent_turns_from_processes(url_and_cluster: tuple[str, bool]) -> None:
    url, cluster = url_and_cluster
    prefix = f"turns-{uuid.uuid4().hex[:8]}"
    workers = ["p0", "p1", "p2"]
    turns = 20
    async with RedisChatStorage(url, prefix=prefix, cluster=cluster) as reader:
        done = anyio.Event()
        seen: list[tuple[int, str]] = []

        async def run(worker: str) -> None:
            result = await anyio.run_process(
                [
                    sys.executable,
                    "-c",
                    WRITER,
                    url,
                    prefix,
                    "1" if cluster else "0",
                    worker,
                    str(turns),
                ],
                check=False,
                cwd=ROOT,
            )
            assert result.returncode == 0, result.stderr.decode(errors="replace")

        async def read() -> None:
            seen.extend(await tail_until(reader, done))

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            async with anyio.create_task_group() as procs:
                for worker in workers:
                    procs.start_soon(run, worker)
            done.set()
        check_contiguous(await reader.fetch(KEY), workers, turns)
        full = await reader.fetch_since(KEY, 0)
        assert seen == [(s, m.id) for s, m in zip(full.seqs, full.messages, strict=True)]
