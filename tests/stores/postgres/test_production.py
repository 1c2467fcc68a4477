"""Production shapes on PostgreSQL: two store instances (two pools) writing batches while the
server is killed and restarted; nothing acknowledged lost, every call fails with a redacted
``StorageUnavailableError`` while it is down, and everything works again after."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from storage.abilities import ConversationRecord
from storage.errors import StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.stores.postgres import PostgresChatStorage
from tests.servers import PostgresServer

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.postgres

KEY = ChatKey("ana", "trip", "agent")
PASSWORD = "pg-Secret-4711"
AT = datetime(2024, 5, 1, tzinfo=UTC)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg


def turn(worker: int, n: int) -> list[ChatMessage]:
    return [
        ChatMessage("user", f"w{worker} turn {n} question", id=f"w{worker}-{n}-q", created_at=AT),
        ChatMessage(
            "assistant", f"w{worker} turn {n} answer", id=f"w{worker}-{n}-a", created_at=AT
        ),
    ]


@pytest.mark.anyio
async def test_restart_mid_run_with_two_instances_loses_nothing_acknowledged(
    postgres_server_factory: type[PostgresServer],
) -> None:
    server = postgres_server_factory(password=PASSWORD)
    server.start()
    stores = [PostgresChatStorage(server.dsn, max_size=3, timeout=5) for _ in range(2)]
    acknowledged: list[list[ChatMessage]] = []
    failed: list[list[ChatMessage]] = []
    errors: list[StorageUnavailableError] = []
    enough = anyio.Event()

    async def writer(worker: int) -> None:
        for n in range(100_000):
            batch = turn(worker, n)
            try:
                stored = await stores[worker].save_messages(KEY, batch)
            except StorageUnavailableError as exc:
                failed.append(batch)
                errors.append(exc)
                return
            assert [m.id for m in stored] == [m.id for m in batch]
            acknowledged.append(batch)
            if len(acknowledged) >= 30:
                enough.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, 0)
            tg.start_soon(writer, 1)
            await enough.wait()
            await anyio.to_thread.run_sync(server.kill)
        assert len(errors) == 2
        # While down, every call fails the same way, password redacted.
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: stores[0].fetch(KEY),
            lambda: stores[1].head(KEY),
            lambda: stores[0].fetch_since(KEY, 0),
            lambda: stores[1].list_sessions("ana"),
            lambda: stores[0].search("ana", "answer"),
            lambda: stores[1].save_record(KEY, ConversationRecord("status", {})),
            lambda: stores[0].acquire_lease(KEY, "me", 5),
            lambda: stores[1].delete_user("nobody"),
        ]
        for call in calls:
            with pytest.raises(StorageUnavailableError) as info:
                await call()
            errors.append(info.value)
        for error in errors:
            text = str(error)
            assert PASSWORD not in text, text
            assert ":***@127.0.0.1" in text, text
            assert error.__cause__ is not None

        await anyio.to_thread.run_sync(server.start)
        tail = await stores[1].fetch_since(KEY, 0)
        ids = [m.id for m in tail.messages]
        assert len(ids) == len(set(ids)), "duplicate after restart"
        for batch in acknowledged:
            start = ids.index(batch[0].id)  # present, and its batch adjacent
            assert ids[start : start + 2] == [m.id for m in batch]
        landed = [b for b in failed if b[0].id in ids]
        assert len(ids) == 2 * (len(acknowledged) + len(landed))
        # Retrying every batch, acknowledged or not, stores each exactly once.
        for batch in acknowledged + failed:
            await stores[0].save_messages(KEY, batch)
        after = await stores[0].fetch(KEY)
        assert len(after) == 2 * (len(acknowledged) + len(failed))
        assert len({m.id for m in after}) == len(after)
        # The summaries kept up through the crash.
        session = (await stores[1].list_sessions("ana")).sessions[0]
        assert session.message_count == len(after)
        assert (await stores[0].head(KEY)).last_seq == (await stores[1].fetch_since(KEY, 0)).seqs[
            -1
        ]
    finally:
        for s in stores:
            await s.aclose()
