"""The SQLite store's derived data rebuilt from the messages: the search index's mark, the
index itself, the per-key and per-session tallies (the kit's fault scenarios cover the
damage every store shares; these are the SQLite-only ones)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


def _execute(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(sql)
    finally:
        conn.close()


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE meta SET value = 1000000000000 WHERE name = 'fts_indexed_to'",
        "UPDATE meta SET value = 'soon' WHERE name = 'fts_indexed_to'",
        "DELETE FROM meta WHERE name = 'fts_indexed_to'",
    ],
    ids=["beyond-every-seq", "not-a-number", "missing"],
)
async def test_an_impossible_index_mark_is_reset_and_nothing_goes_unfound(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "c.db"
    async with SQLiteChatStorage(path) as store:
        (first,) = await store.save(KEY, ChatMessage("user", "refund one"))
        assert [h.message.id for h in await store.search("u", "refund")] == [first.id]
        _execute(path, damage)
        (second,) = await store.save(KEY, ChatMessage("user", "refund two"))
        found = {h.message.id for h in await store.search("u", "refund")}
        assert found == {first.id, second.id}
        assert store.derived_log.kinds["search index"] == 1
        await store.delete(KEY)
        assert await store.search("u", "refund") == []


async def test_a_damaged_index_does_not_stop_an_erasure(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SQLiteChatStorage(path) as store:
        for n in range(30):
            await store.save(ChatKey("gone", f"s{n}", "a"), ChatMessage("user", f"secret {n}"))
        await store.save(KEY, ChatMessage("user", "kept words"))
        assert len(await store.search("gone", "secret", limit=50)) == 30
        _execute(path, "DELETE FROM messages_fts_data WHERE id > 10")
        await store.delete_user("gone")  # through the damaged index
        assert await store.search("gone", "secret") == []
        assert [h.message.text for h in await store.search("u", "kept")] == ["kept words"]
    assert b"secret 1" not in path.read_bytes()
