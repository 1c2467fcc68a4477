"""Concurrent batches on PostgreSQL: each batch contiguous, sequence numbers in commit order.

With a ``bigserial`` drawn row by row, two workers saving 4-message turns to one
key at the same moment interleaved about one run in four, and a row committed late could
get a number below what a tailing reader had already passed. The store now numbers a batch
under the key's row lock. Writers here are two store instances (two pools) and two
processes; run as a module this file is the writer process::

    python -m tests.stores.postgres.test_ordering DSN SCHEMA WORKER ROUNDS
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import anyio
import anyio.lowlevel
import asyncpg
import pytest

from storage.codec import encode
from storage.message import ChatKey, ChatMessage
from storage.stores.postgres import PostgresChatStorage
from tests.paths import REPO

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.postgres

KEY = ChatKey("shared*user", "session:1", "agent")
TURN = 4
ROOT = REPO


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg


@pytest.fixture
async def two_stores(postgres_dsn: str) -> AsyncIterator[list[PostgresChatStorage]]:
    schema = f"o_{uuid.uuid4().hex[:12]}"
    stores = [PostgresChatStorage(postgres_dsn, schema=schema) for _ in range(2)]
    for s in stores:
        await s.open()
    yield stores
    for s in stores:
        await s.aclose()


def turn(worker: int, round_: int) -> list[ChatMessage]:
    """One turn: a user message and three answers, ids naming worker, round and position."""
    roles = ("user", "assistant", "assistant", "assistant")
    return [
        ChatMessage(role, f"w{worker} r{round_} m{n}", id=f"w{worker}-r{round_}-m{n}")
        for n, role in enumerate(roles)
    ]


def check_contiguous(messages: Sequence[ChatMessage], seqs: Sequence[int], turns: int) -> None:
    """Every turn's messages adjacent and in order, with consecutive sequence numbers."""
    assert len(messages) == turns * TURN, "messages lost or duplicated"
    assert list(seqs) == sorted(set(seqs)), "sequence numbers not strictly increasing"
    for start in range(0, len(messages), TURN):
        ids = [m.id for m in messages[start : start + TURN]]
        prefix = ids[0].rsplit("-", 1)[0]
        assert ids == [f"{prefix}-m{n}" for n in range(TURN)], f"turn interleaved at {start}: {ids}"
        chunk = seqs[start : start + TURN]
        assert list(chunk) == list(range(chunk[0], chunk[0] + TURN)), "numbers not contiguous"


@pytest.mark.anyio
async def test_two_pools_saving_turns_at_the_same_moment_stay_contiguous(
    two_stores: list[PostgresChatStorage],
) -> None:
    rounds = 40
    for round_ in range(rounds):
        start = anyio.Event()

        async def worker(n: int, round_: int = round_, start: anyio.Event = start) -> None:
            await start.wait()
            stored = await two_stores[n].save_messages(KEY, turn(n, round_))
            assert len(stored) == TURN

        async with anyio.create_task_group() as tg:
            tg.start_soon(worker, 0)
            tg.start_soon(worker, 1)
            await anyio.lowlevel.checkpoint()
            start.set()
    tail = await two_stores[0].fetch_since(KEY, 0)
    check_contiguous(tail.messages, tail.seqs, rounds * 2)
    assert list(tail.messages) == await two_stores[1].fetch(KEY)
    assert tail.head.last_seq == tail.seqs[-1] == rounds * 2 * TURN


async def _writer(dsn: str, schema: str, worker: int, rounds: int) -> None:
    async with PostgresChatStorage(dsn, schema=schema, max_size=2) as store:
        for round_ in range(rounds):
            assert len(await store.save_messages(KEY, turn(worker, round_))) == TURN


@pytest.mark.anyio
async def test_two_processes_saving_turns_stay_contiguous(postgres_dsn: str) -> None:
    schema = f"o_{uuid.uuid4().hex[:12]}"
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        await s.open()  # the schema exists before the children race on it
    rounds = 30

    async def child(worker: int) -> None:
        args = [sys.executable, "-m", "tests.stores.postgres.test_ordering"]
        args += [postgres_dsn, schema, str(worker), str(rounds)]
        done = await anyio.run_process(args, check=False, cwd=ROOT)
        assert done.returncode == 0, done.stderr.decode(errors="replace")

    async with anyio.create_task_group() as tg:
        for worker in range(2):
            tg.start_soon(child, worker)
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        tail = await s.fetch_since(KEY, 0)
    check_contiguous(tail.messages, tail.seqs, rounds * 2)
    # Each worker's turns in its own order.
    for worker in range(2):
        rounds_seen = [m.id.split("-")[1] for m in tail.messages if m.id.startswith(f"w{worker}-")][
            ::TURN
        ]
        assert rounds_seen == [f"r{n}" for n in range(rounds)]


@pytest.mark.anyio
async def test_numbers_follow_commit_order_so_a_tailing_reader_skips_nothing(
    two_stores: list[PostgresChatStorage], postgres_dsn: str
) -> None:
    """A write whose transaction commits late cannot be overtaken: the next writer of the
    key waits for it, and gets the higher numbers."""
    store, other = two_stores
    await store.save(KEY, ChatMessage("user", "first", id="first"))
    seen = await store.fetch_since(KEY, 0)
    position = seen.head.last_seq
    late = ChatMessage("user", "committed late", id="late", created_at=datetime.now(UTC))
    conn = await asyncpg.connect(postgres_dsn)
    try:
        transaction = conn.transaction()
        await transaction.start()
        # Exactly what the store sends for a save, in a transaction left open.
        await conn.fetchval(
            store._sql.save,
            KEY.user_id,
            KEY.session_id,
            KEY.agent_id,
            [late.id],
            [late.created_at],
            [encode(late)],
            ["committed late"],
            None,
            False,
        )
        saved_meanwhile: list[ChatMessage] = []

        async def save_other() -> None:
            saved_meanwhile.extend(await other.save(KEY, ChatMessage("user", "next", id="next")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(save_other)
            # While the late write is open the other writer waits for the key's lock (seen
            # in pg_stat_activity), and a reader sees nothing new: no number above its
            # position can become visible before the late one.
            with anyio.fail_after(30):
                while True:
                    waiting = await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()"
                    )
                    if waiting:
                        break
                    await anyio.lowlevel.checkpoint()
            tail = await store.fetch_since(KEY, position)
            assert tail.messages == ()
            assert not saved_meanwhile
            await transaction.commit()
        tail = await store.fetch_since(KEY, position)
        assert [m.id for m in tail.messages] == ["late", "next"]
        assert tail.seqs == (position + 1, position + 2)
    finally:
        await conn.close()


@pytest.mark.anyio
async def test_reader_tailing_while_two_pools_write_sees_every_message_once(
    two_stores: list[PostgresChatStorage],
) -> None:
    rounds = 25
    collected: list[tuple[int, str]] = []
    writing = [2]

    async def writer(n: int) -> None:
        for round_ in range(rounds):
            await two_stores[n].save_messages(KEY, turn(n, round_))
        writing[0] -= 1

    async def reader() -> None:
        position = 0
        while True:
            done = writing[0] == 0
            tail = await two_stores[0].fetch_since(KEY, position)
            collected.extend(zip(tail.seqs, (m.id for m in tail.messages), strict=True))
            if tail.seqs:
                position = tail.seqs[-1]
            if done:
                return
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer, 0)
        tg.start_soon(writer, 1)
    final = await two_stores[1].fetch_since(KEY, 0)
    assert collected == list(zip(final.seqs, (m.id for m in final.messages), strict=True))
    check_contiguous(final.messages, final.seqs, rounds * 2)


if __name__ == "__main__":
    anyio.run(_writer, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
