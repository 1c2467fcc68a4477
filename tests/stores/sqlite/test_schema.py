"""SQLite store: the schema version in ``PRAGMA user_version``.

A database written by a newer chatlayers is refused on open with ``SchemaVersionError``
naming both versions, and never written; a database of every older version is migrated
forward, everything in it readable and every ability working on it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.codec import encode
from storage.errors import SchemaVersionError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteChatStorage
from storage.stores.sqlite.writes import to_us

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 3, 1, tzinfo=UTC)
KEYS = [ChatKey("ann", "s1", "a"), ChatKey("ann", "s1", "b"), ChatKey("ann", "s2", "a")]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def version_of(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
    conn.close()
    return int(version)


def build_v1(path: Path) -> dict[ChatKey, list[ChatMessage]]:
    """A version-1 database as chatlayers 1 wrote it: its schema SQL, its rows, WAL mode."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    written: dict[ChatKey, list[ChatMessage]] = {}
    for n, key in enumerate(KEYS):
        messages = [
            ChatMessage(
                "user", f"question {n} about parcels", created_at=T0 + timedelta(minutes=n)
            ),
            ChatMessage(
                "assistant", f"answer {n}", created_at=T0 + timedelta(minutes=n, seconds=1)
            ),
        ]
        written[key] = messages
        conn.executemany(
            "INSERT INTO messages (user_id, session_id, agent_id, message_id, created_us, record) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (key.user_id, key.session_id, key.agent_id, m.id, to_us(m.created_at), encode(m))
                for m in messages
                if m.created_at
            ],
        )
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    return written


async def test_a_newer_database_is_refused_and_never_written(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    async with SQLiteChatStorage(path) as store:
        await store.save(KEYS[0], ChatMessage("user", "hello"))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.execute("PRAGMA journal_mode = DELETE")  # no -wal: the main file is everything
    conn.close()
    before = digest(path)
    store = SQLiteChatStorage(path)
    for attempt in (
        store.fetch(KEYS[0]),
        store.save(KEYS[0], ChatMessage("user", "must not land")),
        store.delete_user("ann"),
    ):
        with pytest.raises(SchemaVersionError) as info:
            await attempt
        text = str(info.value)
        assert f"version {SCHEMA_VERSION + 1}" in text
        assert f"up to {SCHEMA_VERSION}" in text
        assert isinstance(info.value, StorageUnavailableError)
    await store.aclose()
    assert digest(path) == before
    assert version_of(path) == SCHEMA_VERSION + 1
    assert not (tmp_path / "chats.db-wal").exists()


async def test_version_1_is_migrated_and_every_ability_works(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    written = build_v1(path)
    assert version_of(path) == 1
    async with SQLiteChatStorage(path) as store:
        for key, messages in written.items():
            assert await store.fetch(key) == messages
            assert await store.fetch(key, limit=1) == messages[-1:]
        assert version_of(path) == SCHEMA_VERSION
        assert await store.list_keys() == KEYS
        page = await store.list_sessions("ann")
        assert [(s.session_id, s.agents, s.message_count) for s in page.sessions] == [
            ("s2", ("a",), 2),
            ("s1", ("a", "b"), 4),
        ]
        assert page.sessions[0].last_at == T0 + timedelta(minutes=2, seconds=1)
        hits = await store.search("ann", "parcels")
        assert {h.message.id for h in hits} == {m[0].id for m in written.values()}
        head = await store.head(KEYS[0])
        assert head.epoch
        assert head.last_seq == 2
        tail = await store.fetch_since(KEYS[0], 1)
        assert tail.messages == (written[KEYS[0]][1],)
        summary = ChatMessage("system", "s", metadata={"chatlayers": {"summary": True}})
        summaries = (summary,)
        cp = SummaryCheckpoint(summaries, head.last_seq, head.epoch, "t", T0)
        assert await store.save_checkpoint(KEYS[0], cp, expected_version=0) is not None
        record = await store.save_record(KEYS[0], ConversationRecord("status", {"ok": True}))
        assert record.seq > max([(await store.head(k)).last_seq for k in KEYS])
        new = await store.save(KEYS[0], ChatMessage("user", "after the upgrade"))
        assert (await store.fetch(KEYS[0]))[-1] == new[0]
        assert (await store.head(KEYS[0])).last_seq > record.seq
        await store.replace(KEYS[1], [ChatMessage("user", "replaced")])
        await store.delete(KEYS[2])
        assert await store.list_keys() == KEYS[:2]
        sessions = await store.list_sessions("ann")
        heads = [await store.head(k) for k in KEYS]
    # Reopening a migrated database migrates nothing again (no tallies counted twice).
    async with SQLiteChatStorage(path) as again:
        assert len(await again.fetch(KEYS[0])) == 3
        assert await again.list_sessions("ann") == sessions
        assert [await again.head(k) for k in KEYS] == heads
    assert version_of(path) == SCHEMA_VERSION


async def test_an_empty_file_is_version_0_and_gets_the_whole_schema(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    path.touch()
    async with SQLiteChatStorage(path) as store:
        await store.save(KEYS[0], ChatMessage("user", "x"))
    assert version_of(path) == SCHEMA_VERSION
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert {"messages", "conversations", "sessions", "checkpoints", "leases", "records"} <= tables
    assert "messages_fts" in tables


async def test_two_stores_migrating_one_version_1_file(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    written = build_v1(path)
    first, second = SQLiteChatStorage(path), SQLiteChatStorage(path)
    try:
        assert await first.fetch(KEYS[0]) == written[KEYS[0]]
        assert await second.fetch(KEYS[0]) == written[KEYS[0]]  # already migrated: a no-op
        assert (await second.list_sessions("ann")).sessions[1].message_count == 4
    finally:
        await first.aclose()
        await second.aclose()
