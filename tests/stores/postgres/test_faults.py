"""PostgreSQL under faults no other module covers: every connection of the pool busy, and a
call too large for the server's protocol. Each call must end within its time bound with a
chatlayers error that says what to do, and the store must work again afterwards."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable

import anyio
import asyncpg
import pytest

from storage.errors import InvalidMessageError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.stores.postgres import PostgresChatStorage
from storage.stores.postgres.text import MAX_CALL_BYTES

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


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_batch_over_the_protocol_limit_is_refused_before_it_is_sent(
    postgres_dsn: str,
) -> None:
    # PostgreSQL drops the connection on a message over 1 GiB ("invalid message length"):
    # a 1.2 GB batch used to be encoded and sent for minutes, then raise
    # StorageUnavailableError, which a caller retries, forever. It is a bad batch.
    async with PostgresChatStorage(postgres_dsn, schema=_schema(), timeout=30) as store:
        huge = ChatMessage("user", "x" * (MAX_CALL_BYTES + 1))
        with pytest.raises(InvalidMessageError, match="smaller batches"):
            await store.save_messages(IDLE, [ChatMessage("user", "before"), huge])
        del huge
        assert await store.fetch(IDLE) == []
        await store.save(IDLE, ChatMessage("user", "after"))
        assert [m.content for m in await store.fetch(IDLE)] == ["after"]


@pytest.mark.anyio
async def test_the_call_size_limit_counts_encoded_bytes(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same rule at a 10 MB limit: bytes of UTF-8 once encoded, not characters; every
    # write that sends messages checks it, and what is refused stores nothing.
    import storage.stores.postgres.text as text
    import storage.stores.postgres.writes as writes

    limit = 10_000_000
    monkeypatch.setattr(text, "MAX_CALL_BYTES", limit)
    monkeypatch.setattr(writes, "MAX_CALL_BYTES", limit)
    async with PostgresChatStorage(postgres_dsn, schema=_schema()) as store:
        fits = [ChatMessage("user", "x" * 9_000_000), ChatMessage("user", "é" * 3_000_000)]
        for message in fits:
            assert [m.id for m in await store.save(IDLE, message)] == [message.id]
        two_bytes_each = ChatMessage("user", "é" * 6_000_000)  # 6 M characters, 12 MB
        head = await store.head(IDLE)
        refused: list[Callable[[], Awaitable[object]]] = [
            lambda: store.save(IDLE, two_bytes_each),
            lambda: store.save_messages(IDLE, fits),  # a batch counts whole
            lambda: store.replace(IDLE, [two_bytes_each]),
            lambda: store.save_messages_if(IDLE, [two_bytes_each], expected_version=head.version),
        ]
        for write in refused:
            with pytest.raises(InvalidMessageError, match="bytes once encoded"):
                await write()
        assert [m.id for m in await store.fetch(IDLE)] == [m.id for m in fits]
