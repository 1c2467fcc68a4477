"""PostgresChatStorage on a real, throw-away PostgreSQL cluster (tests/servers.py).

The protocol's semantics are checked by the conformance suite ("postgres" stack) and here
against the in-memory store; this module checks NUL handling, ordering after rows move,
faults, concurrent writers and configuration. The schema is in test_postgres_schema.py,
batch ordering in test_postgres_ordering.py, erasure in test_postgres_erasure.py, the
optional abilities in test_postgres_abilities.py.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import anyio
import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings

pytest.register_assert_rewrite("tests.server_scenarios", "tests.servers")

from storage.errors import (  # noqa: E402
    ConfigError,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidMessageError,
    StorageUnavailableError,
)
from storage.message import ChatKey, ChatMessage, ToolCall  # noqa: E402
from storage.stores.jsonl import JsonlChatStorage  # noqa: E402
from storage.stores.memory import InMemoryChatStorage  # noqa: E402
from storage.stores.postgres import PostgresChatStorage  # noqa: E402
from storage.stores.postgres.store import OTHER_STORES_OPTIONS  # noqa: E402
from storage.stores.redis import RedisChatStorage  # noqa: E402
from storage.stores.sqlite import SQLiteChatStorage  # noqa: E402
from tests.server_scenarios import (  # noqa: E402
    check_concurrent_result,
    kill_mid_run,
    operations,
    run_writers,
    same_as_memory,
    writer_processes,
)
from tests.servers import PostgresServer, free_port  # noqa: E402

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.postgres

KEY = ChatKey("u", "s", "a")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg


def _schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresChatStorage]:
    async with PostgresChatStorage(postgres_dsn, schema=_schema()) as s:
        yield s


@pytest.fixture
async def conn(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(postgres_dsn)
    yield c
    await c.close()


# --------------------------------------------------------------------------- semantics


@pytest.mark.anyio
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations())
async def test_same_results_as_memory_store(
    postgres_dsn: str, ops: list[tuple[object, ...]]
) -> None:
    async with PostgresChatStorage(postgres_dsn, schema="differential") as s:
        await same_as_memory(s, ops, uuid.uuid4().hex[:8])


# --------------------------------------------------------------------------- tables


@pytest.mark.anyio
async def test_dsn_options_and_separate_tables(postgres_dsn: str) -> None:
    schema = _schema()
    async with (
        PostgresChatStorage(f"{postgres_dsn}?schema={schema}&table=one") as one,
        PostgresChatStorage(postgres_dsn, schema=schema, table="two") as two,
    ):
        assert (one.schema, one.table) == (schema, "one")
        await one.save(KEY, ChatMessage("user", "in one"))
        assert await two.fetch(KEY) == []
        assert [m.text for m in await one.fetch(KEY)] == ["in one"]


# --------------------------------------------------------------------------- data


@pytest.mark.anyio
async def test_nul_characters_round_trip_everywhere(
    store: PostgresChatStorage, conn: asyncpg.Connection
) -> None:
    messages = [
        ChatMessage("user", "a\x00b", id="id\x00one", metadata={"k\x00": ["v\x00"]}),
        ChatMessage(
            "assistant", None, (ToolCall("c\x001", "f", '{"x": "\\u0000"}'),), id="id\\0one"
        ),
        ChatMessage("tool", "\x00", tool_call_id="c\x001", name="f\x00"),
    ]
    stored = await store.save_messages(KEY, messages)
    assert [m.id for m in stored] == [m.id for m in messages]
    assert await store.fetch(KEY) == stored
    fetched = await store.fetch(KEY)
    assert [(m.content, m.id, m.name) for m in fetched] == [
        ("a\x00b", "id\x00one", None),
        (None, "id\\0one", None),
        ("\x00", messages[2].id, "f\x00"),
    ]
    assert fetched[0].metadata == {"k\x00": ("v\x00",)}
    assert fetched[1].tool_calls[0].id == "c\x001"
    # "id\x00one" and "id\\0one" are distinct ids: both stored, and retries are no-ops.
    assert await store.save_messages(KEY, messages) == []
    ids = await conn.fetch(
        f'SELECT message_id FROM "{store.schema}".chatlayers_messages ORDER BY seq'
    )
    assert [r[0] for r in ids][:2] == ["id\\0one", "id\\\\0one"]


@pytest.mark.anyio
async def test_ordering_by_sequence_survives_vacuum_full(
    store: PostgresChatStorage, conn: asyncpg.Connection
) -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    messages = [ChatMessage("user", f"m{n}", created_at=at) for n in range(60)]
    for n in range(0, 60, 6):
        await store.save_messages(KEY, messages[n : n + 6])
        await store.save(ChatKey("u", "s", "other"), ChatMessage("user", f"o{n}", created_at=at))
    table = f'"{store.schema}".chatlayers_messages'
    # Move rows physically: rewrite the oldest ones, drop the other agent's, compact.
    await conn.execute(f"UPDATE {table} SET record = record WHERE seq % 3 = 0")
    await conn.execute(f"DELETE FROM {table} WHERE agent_id = 'other' AND seq % 2 = 0")
    await conn.execute(f"VACUUM FULL {table}")
    assert await store.fetch(KEY) == messages
    assert await store.fetch(KEY, limit=7) == messages[-7:]
    merged = [c.message for c in await store.fetch_all_chats("u", "s") if c.agent_id == "a"]
    assert merged == messages


@pytest.mark.anyio
async def test_bad_input_writes_nothing(store: PostgresChatStorage) -> None:
    with pytest.raises(InvalidMessageError):
        await store.save_messages(KEY, [ChatMessage("user", "ok"), ChatMessage("robot", "x")])
    with pytest.raises(InvalidKeyError, match="surrogate"):
        await store.save(ChatKey("u\ud800", "s", "a"), ChatMessage("user", "x"))
    with pytest.raises(InvalidMessageError, match="surrogate"):
        await store.save(KEY, ChatMessage("user", "bad \udc80"))
    assert await store.fetch(KEY) == []
    assert await store.fetch_all_chats("u", "s") == []


# --------------------------------------------------------------------------- concurrency


@pytest.mark.anyio
async def test_concurrent_tasks_through_two_instances(postgres_dsn: str) -> None:
    schema = _schema()
    stores = [PostgresChatStorage(postgres_dsn, schema=schema) for _ in range(2)]
    try:
        await run_writers(stores, range(20), 50, 5)
        await check_concurrent_result(stores[1], range(20), 50, 5)
    finally:
        for s in stores:
            await s.aclose()


@pytest.mark.anyio
async def test_concurrent_processes(postgres_dsn: str) -> None:
    schema = _schema()
    await writer_processes(
        "postgres", postgres_dsn, schema, processes=2, tasks=10, per_task=50, keys=5
    )
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        await check_concurrent_result(s, range(20), 50, 5)


# --------------------------------------------------------------------------- faults


@pytest.mark.anyio
async def test_server_down_at_start_raises_unavailable_with_password_redacted() -> None:
    port = free_port()
    s = PostgresChatStorage(f"postgresql://chat:hunter2secret@127.0.0.1:{port}/chats")
    for call in (s.open(), s.fetch(KEY), s.save(KEY, ChatMessage("user", "x"))):
        with pytest.raises(StorageUnavailableError) as info:
            await call
        message = str(info.value)
        assert "hunter2secret" not in message
        assert f"postgresql://chat:***@127.0.0.1:{port}/chats" in message
        assert info.value.__cause__ is not None
    assert "hunter2secret" not in repr(s)
    await s.aclose()


@pytest.mark.anyio
async def test_wrong_password_is_unavailable_and_redacted(
    postgres_server_factory: type[PostgresServer],
) -> None:
    server = postgres_server_factory(password="right-password")
    server.start()
    wrong = server.dsn.replace("right-password", "wrong-password")
    async with PostgresChatStorage(wrong) as s:
        with pytest.raises(StorageUnavailableError) as info:
            await s.fetch(KEY)
    assert "wrong-password" not in str(info.value)
    assert "password authentication failed" in str(info.value)


@pytest.mark.anyio
async def test_server_killed_mid_run_then_restarted(
    postgres_server_factory: type[PostgresServer],
) -> None:
    password = "s3cret-pg-pw"
    server = postgres_server_factory(password=password)
    server.start()
    async with PostgresChatStorage(server.dsn, max_size=3) as s:
        await kill_mid_run(s, server.kill, server.start, password, KEY)


@pytest.mark.anyio
async def test_closed_store_refuses_calls(postgres_dsn: str) -> None:
    s = PostgresChatStorage(postgres_dsn, schema=_schema())
    await s.save(KEY, ChatMessage("user", "x"))
    await s.aclose()
    await s.aclose()
    with pytest.raises(StorageUnavailableError, match="closed"):
        await s.fetch(KEY)


# --------------------------------------------------------------------------- config


def test_trio_is_refused_with_a_clear_error(postgres_dsn: str) -> None:
    async def use() -> None:
        s = PostgresChatStorage(postgres_dsn, schema=_schema())
        with pytest.raises(ConfigError, match="asyncio"):
            await s.fetch(KEY)

    anyio.run(use, backend="trio")


def test_config_and_redaction() -> None:
    s = PostgresChatStorage("postgresql://me:pw-secret@h/db?schema=x&sslmode=disable")
    assert (s.schema, s.table) == ("x", "chatlayers_messages")
    assert "pw-secret" not in repr(s)
    assert "pw-secret" not in s.describe()
    assert s.dsn == "postgresql://me:***@h/db?schema=x&sslmode=disable"
    assert "schema" not in s._dsn
    assert "sslmode=disable" in s._dsn
    pooled = PostgresChatStorage("postgresql://h/db?max_size=3&timeout=2.5&min_size=0")
    assert pooled._ctx.pool_options["max_size"] == 3
    assert (pooled._ctx.pool_options["min_size"], pooled._ctx.pool_options["timeout"]) == (0, 2.5)
    assert pooled._dsn == "postgresql://h/db"


def test_from_url_keeps_driver_query_and_redacts() -> None:
    url = "postgresql://me:pw-secret@h:5433/db?sslmode=require&schema=chat&table=t1"
    s = PostgresChatStorage.from_url(url, schema="chat", table="t1", retention="30d")
    assert (s.schema, s.table, s.retention) == ("chat", "t1", 30 * 86400.0)
    # The driver gets its own parameters, never chatlayers' options.
    assert s._dsn == "postgresql://me:pw-secret@h:5433/db?sslmode=require"
    described = s.describe()
    assert described == (
        "postgresql://me:***@h:5433/db?sslmode=require&schema=chat&table=t1 "
        "(table=chat.t1, retention=30d)"
    )
    assert "pw-secret" not in repr(s)
    # A driver parameter handed over as an option (a generic converter) stays in the DSN.
    s2 = PostgresChatStorage.from_url("postgres://h/db?sslmode=disable", sslmode="disable")
    assert s2._dsn == "postgres://h/db?sslmode=disable"


@pytest.mark.parametrize(
    ("query", "meant"),
    [
        ("ttl=3600", "retention"),  # Redis's expiry
        ("expiry=30d", "retention"),
        ("retension=30d", "retention"),
        ("purge_intervall=1h", "purge_interval"),
        ("max_sise=4", "max_size"),
        ("tabel=x", "table"),
        ("scheme=x", "schema"),
    ],
)
def test_a_misspelt_option_or_another_stores_expiry_is_config_not_a_server_setting(
    query: str, meant: str
) -> None:
    # Left in the DSN, asyncpg would send it to the server as a setting, and every connect
    # would fail with "unrecognized configuration parameter" far from the URL.
    with pytest.raises(ConfigError, match=rf"is not an option .*did you mean '{meant}'") as e:
        PostgresChatStorage.from_url(f"postgresql://me:pw-secret@h/db?sslmode=disable&{query}")
    assert "pw-secret" not in str(e.value)
    # Server settings stay in the DSN as before, however close their names look.
    s = PostgresChatStorage("postgresql://h/db?timezone=UTC&application_name=chat&search_path=a")
    assert s._dsn == "postgresql://h/db?timezone=UTC&application_name=chat&search_path=a"


def test_another_stores_option_on_a_postgresql_url_names_that_store() -> None:
    with pytest.raises(ConfigError, match=r"'prefix' is not an option .*of the Redis store"):
        PostgresChatStorage("postgresql://h/db?prefix=chat")
    # The list is every other built-in store's own options (not the shared ones).
    others: set[str] = set()
    for store in (RedisChatStorage, SQLiteChatStorage, JsonlChatStorage, InMemoryChatStorage):
        params = inspect.signature(store.__init__).parameters.values()
        others |= {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    own = {p.name for p in inspect.signature(PostgresChatStorage.__init__).parameters.values()}
    assert set(OTHER_STORES_OPTIONS) == others - own


@pytest.mark.parametrize("url", ["mysql://h/db", "sqlite:///x.db"])
def test_from_url_refuses_other_schemes(url: str) -> None:
    with pytest.raises(ConfigError, match="postgresql://"):
        PostgresChatStorage.from_url(url)


@pytest.mark.parametrize(
    "dsn",
    [
        "mysql://h/db",
        "postgresql://h/db?retention=-1d",
        "postgresql://h/db?max_size=many",
        f"postgresql://h/db?table={'x' * 49}",
        "postgresql://h/db?min_size=-1",
    ],
)
def test_a_bad_dsn_raises_config_error(dsn: str) -> None:
    with pytest.raises(ConfigError):
        PostgresChatStorage(dsn)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"table": "x" * 49}, "table"),
        ({"schema": "a\x00b"}, "schema"),
        ({"min_size": 5, "max_size": 2}, "min_size"),
        ({"max_size": 0}, "max_size"),
        ({"timeout": -1}, "timeout"),
        ({"retention": "soon"}, "retention"),
        ({"retention": 0}, "retention"),
    ],
)
def test_a_bad_option_raises_invalid_argument_error(options: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        PostgresChatStorage("postgresql://h/db", **options)  # type: ignore[arg-type]
