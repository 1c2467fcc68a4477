"""PostgreSQL schema versions: creation, migration from version 1, refusing a newer database."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import anyio
import asyncpg
import pytest

from storage.codec import encode
from storage.errors import SchemaVersionError
from storage.message import ChatKey, ChatMessage
from storage.stores.postgres import SCHEMA_VERSION, PostgresChatStorage
from storage.stores.postgres import schema as pg_schema

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.postgres

KEY = ChatKey("u", "s", "a")
AT = datetime(2024, 5, 1, tzinfo=UTC)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg


@pytest.fixture
async def conn(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(postgres_dsn)
    yield c
    await c.close()


def _schema() -> str:
    return f"v_{uuid.uuid4().hex[:12]}"


async def _dump(conn: asyncpg.Connection, schema: str) -> dict[str, list[str]]:
    """Every row of every table of ``schema``, as text, sorted (to compare before/after)."""
    tables = await conn.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
    )
    out: dict[str, list[str]] = {}
    for (name,) in tables:
        rows = await conn.fetch(f'SELECT t::text FROM "{schema}"."{name}" t')
        out[name] = sorted(r[0] for r in rows)
    return out


@pytest.mark.anyio
async def test_schema_created_on_first_use_with_version_row(
    postgres_dsn: str, conn: asyncpg.Connection
) -> None:
    schema = _schema()
    s = PostgresChatStorage(postgres_dsn, schema=schema)
    assert await conn.fetchval("SELECT to_regnamespace($1)", schema) is None  # lazy
    await s.save(KEY, ChatMessage("user", "hi"))
    rows = await conn.fetch(f'SELECT version FROM "{schema}".chatlayers_messages_version')
    assert [r[0] for r in rows] == [SCHEMA_VERSION] == [3]
    indexes = {
        r[0]: r[1]
        for r in await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1", schema
        )
    }
    by_key = indexes["chatlayers_messages_by_key"]
    assert "UNIQUE" in by_key
    assert "(user_id, session_id, agent_id, key_seq)" in by_key
    assert "UNIQUE" in indexes["chatlayers_messages_by_id"]
    assert "gin (search)" in indexes["chatlayers_messages_fts"]
    assert "(user_id, last_at DESC, session_id)" in indexes["chatlayers_messages_sessions_last"]
    tables = {
        r[0]
        for r in await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
    }
    assert tables == {
        f"chatlayers_messages{suffix}"
        for suffix in (
            "",
            "_keys",
            "_sessions",
            "_checkpoints",
            "_cp_versions",
            "_leases",
            "_records",
            "_rewinds",
            "_rewound",
            "_version",
        )
    }
    await s.aclose()
    # Reopening migrates nothing and keeps the data.
    async with PostgresChatStorage(postgres_dsn, schema=schema) as again:
        await again.open()
        assert [m.text for m in await again.fetch(KEY)] == ["hi"]
    assert await conn.fetchval(f'SELECT count(*) FROM "{schema}".chatlayers_messages_version') == 1


async def _make_v1(conn: asyncpg.Connection, schema: str) -> list[tuple[ChatKey, ChatMessage]]:
    """A database exactly as chatlayers 0.1 (schema version 1) left it, with interleaved
    global sequence numbers across keys (and a NUL-holding message)."""
    await conn.execute(f'CREATE SCHEMA "{schema}"')
    template = {
        "t": f'"{schema}".chatlayers_messages',
        "by_key": "chatlayers_messages_by_key",
        "by_id": "chatlayers_messages_by_id",
    }
    for statement in pg_schema.MIGRATIONS[0][0]:
        await conn.execute(statement.format(**template))
    await conn.execute(f'CREATE TABLE "{schema}".chatlayers_messages_version (version integer)')
    await conn.execute(f'INSERT INTO "{schema}".chatlayers_messages_version VALUES (1)')
    keys = [
        ChatKey("ana", "trip", "agent"),
        ChatKey("ana", "trip", "other"),
        ChatKey("bo", "x", "y"),
    ]
    saved: list[tuple[ChatKey, ChatMessage]] = []
    for n in range(12):
        key = keys[n % 3]
        text = f"old message {n} about refunds" if n != 4 else "nul \x00 inside"
        message = ChatMessage("user", text, created_at=AT + timedelta(minutes=n))
        await conn.execute(
            f'INSERT INTO "{schema}".chatlayers_messages '
            "(user_id, session_id, agent_id, message_id, created_at, record) "
            "VALUES ($1, $2, $3, $4, $5, $6)",
            key.user_id,
            key.session_id,
            key.agent_id,
            message.id,
            message.created_at,
            encode(message),
        )
        saved.append((key, message))
    return saved


@pytest.mark.anyio
async def test_version_1_database_migrates_with_its_data(
    postgres_dsn: str, conn: asyncpg.Connection
) -> None:
    schema = _schema()
    saved = await _make_v1(conn, schema)
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        for key in {k for k, _ in saved}:
            expected = [m for k, m in saved if k == key]
            assert await s.fetch(key) == expected
            assert await s.fetch(key, limit=2) == expected[-2:]
        ana = ChatKey("ana", "trip", "agent")
        head = await s.head(ana)
        old_last = head.last_seq
        assert old_last == 10
        assert head.epoch
        # New saves continue after the old numbers, contiguous.
        await s.save_messages(ana, [ChatMessage("user", "new one"), ChatMessage("user", "two")])
        tail = await s.fetch_since(ana, old_last)
        assert tail.seqs == (old_last + 1, old_last + 2)
        # Summaries and search were built from the old rows.
        page = await s.list_sessions("ana")
        assert [(i.session_id, i.agents, i.message_count) for i in page.sessions] == [
            ("trip", ("agent", "other"), 10)
        ]
        hits = await s.search("ana", "refunds")
        assert len(hits) == 7
        assert {h.key.user_id for h in hits} == {"ana"}
        assert await s.list_keys() == sorted({k for k, _ in saved}, key=lambda k: k.agent_id)
    version = await conn.fetchval(f'SELECT version FROM "{schema}".chatlayers_messages_version')
    assert version == SCHEMA_VERSION


@pytest.mark.anyio
async def test_newer_database_is_refused_and_never_written(
    postgres_dsn: str, conn: asyncpg.Connection
) -> None:
    schema = _schema()
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        await s.save(KEY, ChatMessage("user", "written by this version"))
    newer = SCHEMA_VERSION + 1
    await conn.execute(f'UPDATE "{schema}".chatlayers_messages_version SET version = $1', newer)
    before = await _dump(conn, schema)
    s = PostgresChatStorage(postgres_dsn, schema=schema)
    for call in (s.open, lambda: s.save(KEY, ChatMessage("user", "x")), lambda: s.fetch(KEY)):
        with pytest.raises(SchemaVersionError) as info:
            await call()
        message = str(info.value)
        assert f"schema version {newer}" in message
        assert f"version {SCHEMA_VERSION}" in message
    await s.aclose()
    assert await _dump(conn, schema) == before


@pytest.mark.anyio
async def test_newer_version_found_under_the_migration_lock_is_refused(
    postgres_dsn: str, conn: asyncpg.Connection
) -> None:
    # The version table exists (a newer release created it) but no table of ours does.
    schema = _schema()
    await conn.execute(f'CREATE SCHEMA "{schema}"')
    await conn.execute(f'CREATE TABLE "{schema}".chatlayers_messages_version (version integer)')
    await conn.execute(f'INSERT INTO "{schema}".chatlayers_messages_version VALUES (7)')
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        with pytest.raises(SchemaVersionError, match="schema version 7"):
            await s.open()
    assert await _dump(conn, schema) == {"chatlayers_messages_version": ["(7)"]}


@pytest.mark.anyio
async def test_forward_migration_keeps_data(
    postgres_dsn: str, conn: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = _schema()
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        await s.save(KEY, ChatMessage("user", "before"))
    calls: list[str] = []

    async def python_step(c: object, names: object) -> None:
        calls.append("ran")

    step = (("CREATE INDEX chatlayers_messages_extra ON {t} (message_id)",), python_step)
    monkeypatch.setattr(pg_schema, "MIGRATIONS", (*pg_schema.MIGRATIONS, step))
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        assert [m.text for m in await s.fetch(KEY)] == ["before"]
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        await s.open()  # already at the new version: nothing runs again
    version = await conn.fetchval(f'SELECT version FROM "{schema}".chatlayers_messages_version')
    assert version == SCHEMA_VERSION + 1
    assert calls == ["ran"]
    assert await conn.fetchval(
        "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = $2",
        schema,
        "chatlayers_messages_extra",
    )


@pytest.mark.anyio
async def test_concurrent_first_use_migrates_once(postgres_dsn: str) -> None:
    schema = _schema()
    stores = [PostgresChatStorage(postgres_dsn, schema=schema) for _ in range(6)]
    try:
        async with anyio.create_task_group() as tg:
            for n, s in enumerate(stores):
                tg.start_soon(s.save, ChatKey("u", "s", f"a{n}"), ChatMessage("user", str(n)))
        assert len(await stores[0].fetch_all_chats("u", "s")) == 6
    finally:
        for s in stores:
            await s.aclose()
