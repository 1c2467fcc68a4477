"""PostgreSQL under faults no other module covers: every connection of the pool busy. Each
call must end within its time bound with a chatlayers error that says what to do, and the
store must work again afterwards."""

from __future__ import annotations

import contextlib
import time
import uuid

import anyio
import asyncpg
import pytest

from storage.errors import StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.stores.postgres import PostgresChatStorage

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.postgres

LOCKED = ChatKey("ana", "trip", "locked")
IDLE = ChatKey("ana", "trip", "idle")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg


def _schema() -> str:
    return f"f_{uuid.uuid4().hex[:12]}"


@pytest.mark.anyio
async def test_a_call_waits_for_a_pooled_connection_at_most_timeout(postgres_dsn: str) -> None:
    # Three saves stuck behind a row lock hold the pool's one connection in turn, each for
    # its statement timeout; a fetch of another conversation queued behind them used to wait
    # for all of them (about 3 s here, one timeout per call queued before it). Now every call
    # waits at most the timeout for a connection: the fetch ends (served, or refused naming
    # the pool) within about 1 s, and the saves the lock never let through say why.
    schema = _schema()
    store = PostgresChatStorage(postgres_dsn, schema=schema, max_size=1, timeout=1)
    holder = await asyncpg.connect(postgres_dsn)
    failed: list[StorageUnavailableError] = []

    async def stuck_save(n: int) -> None:
        with pytest.raises(StorageUnavailableError) as info:
            await store.save(LOCKED, ChatMessage("user", f"stuck {n}"))
        failed.append(info.value)

    try:
        await store.save(LOCKED, ChatMessage("user", "first"))
        await store.save(IDLE, ChatMessage("user", "idle"))
        async with holder.transaction():
            await holder.execute(
                f'SELECT 1 FROM "{schema}".chatlayers_messages_keys WHERE agent_id = $1 FOR UPDATE',
                LOCKED.agent_id,
            )
            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(stuck_save, n)
                await anyio.sleep(0.2)
                started = time.monotonic()
                with contextlib.suppress(StorageUnavailableError):
                    await store.fetch(IDLE)
                waited = time.monotonic() - started
        assert waited < 1.6, f"the fetch waited {waited:.1f} s for a connection"
        assert len(failed) == 3
        assert any("pool's connections stayed busy (raise max_size" in str(e) for e in failed)
        # The statement timeout says what timed out, and nothing stuck was stored.
        assert any("no answer within 1 s" in str(e) for e in failed), failed
        assert [m.content for m in await store.fetch(LOCKED)] == ["first"]
        assert [m.content for m in await store.fetch(IDLE)] == ["idle"]
    finally:
        await holder.close()
        await store.aclose()
