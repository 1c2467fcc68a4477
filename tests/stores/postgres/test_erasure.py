"""Erasure on PostgreSQL: after ``delete``/``delete_user`` no table holds the text, and after
``vacuum()`` (``VACUUM FULL``) plus a checkpoint no data file does either."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.postgres import PostgresChatStorage
from tests.servers import PostgresServer

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.postgres

SUMMARY = {"chatlayers": {"summary": True}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg


async def _rows_holding(conn: asyncpg.Connection, schema: str, text: str) -> dict[str, int]:
    """How many rows of each table of ``schema`` hold ``text`` anywhere (whole row as text,
    the search vector included)."""
    tables = await conn.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
    )
    found: dict[str, int] = {}
    for (name,) in tables:
        n = await conn.fetchval(
            f'SELECT count(*) FROM "{schema}"."{name}" t WHERE strpos(lower(t::text), $1) > 0',
            text.lower(),
        )
        if n:
            found[name] = n
    return found


async def _fill(store: PostgresChatStorage, key: ChatKey, secret: str) -> None:
    """The secret in a message, a tool call, a rewound message, a record, a checkpoint (and
    its kept version) and a lease owner."""
    await store.save_messages(
        key,
        [
            ChatMessage("user", f"my name is {secret}"),
            ChatMessage("assistant", None, (ToolCall("c1", "lookup", f'{{"q": "{secret}"}}'),)),
            ChatMessage("tool", f"found {secret}", tool_call_id="c1"),
            ChatMessage("assistant", f"rewound {secret}", id=f"gone-{secret}"),
        ],
    )
    kept = (await store.fetch(key))[2].id
    assert await store.rewind(key, kept) == 1
    await store.save_record(key, ConversationRecord("note", {"who": secret}))
    tail = await store.fetch_since(key, 0)  # a checkpoint covers messages of the view
    checkpoint = SummaryCheckpoint(
        (ChatMessage("system", f"summary of {secret}", metadata=SUMMARY),),
        tail.seqs[-1],
        tail.head.epoch,
        "manual",
        datetime.now(UTC),
    )
    assert await store.save_checkpoint(key, checkpoint, expected_version=0) is not None
    assert await store.acquire_lease(key, f"worker-{secret}", 30)


@pytest.mark.anyio
async def test_delete_and_delete_user_leave_no_row_holding_the_text(postgres_dsn: str) -> None:
    schema = f"e_{uuid.uuid4().hex[:12]}"
    one, two = ChatKey("ana", "s1", "a"), ChatKey("ana", "s2", "a")
    keep = ChatKey("bo", "s1", "a")
    conn = await asyncpg.connect(postgres_dsn)
    try:
        async with PostgresChatStorage(postgres_dsn, schema=schema) as store:
            await _fill(store, one, "Zorblaxian")
            await _fill(store, two, "Quuxorama")
            await _fill(store, keep, "Keepsakeword")
            before = await _rows_holding(conn, schema, "Zorblaxian")
            # Messages (4, one rewound; search vectors in the same rows), record,
            # checkpoint and its version, lease.
            assert before == {
                "chatlayers_messages": 4,
                "chatlayers_messages_records": 1,
                "chatlayers_messages_checkpoints": 1,
                "chatlayers_messages_cp_versions": 1,
                "chatlayers_messages_leases": 1,
            }
            await store.delete(one)
            assert await _rows_holding(conn, schema, "Zorblaxian") == {}
            assert await _rows_holding(conn, schema, "Quuxorama") != {}
            for table in ("keys", "sessions"):  # the key itself is gone too
                assert not await conn.fetchval(
                    f'SELECT count(*) FROM "{schema}".chatlayers_messages_{table} '
                    "WHERE user_id = 'ana' AND session_id = 's1'"
                )
            await store.delete_user("ana")
            assert await _rows_holding(conn, schema, "Quuxorama") == {}
            assert await _rows_holding(conn, schema, "ana") == {}
            # Nothing else was touched.
            assert len(await store.fetch(keep)) == 3
            assert len((await store.fetch_timeline(keep)).messages) == 4
            assert await store.load_checkpoint(keep) is not None
            assert len(await store.fetch_records(keep)) == 1
            assert await store.search("bo", "Keepsakeword")
            assert await store.search("ana", "Quuxorama") == []
            assert (await store.list_sessions("ana")).sessions == ()
            assert await store.head(one) == await store.head(two)
    finally:
        await conn.close()


def _files_holding(root: Path, needle: bytes) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle in path.read_bytes():
            hits.append(str(path.relative_to(root)))
    return hits


@pytest.mark.anyio
async def test_erased_text_leaves_the_data_files_after_vacuum_full(
    postgres_server_factory: type[PostgresServer],
) -> None:
    server = postgres_server_factory()
    server.start()
    secret = "Xylophonist" + uuid.uuid4().hex[:8]
    big = f"{secret} " * 400  # long enough to be TOASTed (compressed out of line)
    conn = await asyncpg.connect(server.dsn)
    try:
        async with PostgresChatStorage(server.dsn) as store:
            key = ChatKey("erase-me", "s", "a")
            await _fill(store, key, secret)
            await store.save(key, ChatMessage("user", big))
            await store.save(ChatKey("other", "s", "a"), ChatMessage("user", "unrelated text"))
            await conn.execute("CHECKPOINT")
            base = server.data / "base"
            assert _files_holding(base, secret.encode()), "the grep would not find the text"
            await store.delete_user("erase-me")
            await store.vacuum()
            await conn.execute("CHECKPOINT")
            assert _files_holding(base, secret.encode()) == []
            assert _files_holding(base, secret.lower().encode()) == []  # GIN lexemes
            assert [m.text for m in await store.fetch(ChatKey("other", "s", "a"))] == [
                "unrelated text"
            ]
    finally:
        await conn.close()
