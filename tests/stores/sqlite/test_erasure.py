"""SQLite store erasure: after ``delete`` / ``delete_user`` / a retention purge returns, the erased
text is in none of the database's files (main, ``-wal``, ``-shm``): messages, their search index,
summary checkpoints and records alike.

Every check greps the raw bytes of every file, for the text as written and for the
normalized words the search index holds; a marker of data that was kept is found by the
same grep, so the grep itself can fail.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def files(path: Path) -> list[Path]:
    return [p for p in path.parent.iterdir() if p.name.startswith(path.name)]


def raw(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in files(path))


def markers(tag: str) -> list[str]:
    """Unique words for one conversation: in a short message, a long one (overflow pages),
    a summary and a record."""
    return [f"{kind}{tag}zq" for kind in ("short", "long", "summary", "record")]


async def fill(store: SQLiteChatStorage, key: ChatKey, tag: str, at: datetime = T0) -> None:
    short, long, summ, record = markers(tag)
    filler = " ".join(f"filler{n}" for n in range(2000))  # ~20 kB: overflow pages
    await store.save_messages(
        key,
        [
            ChatMessage("user", f"my secret is {short}", created_at=at),
            ChatMessage("assistant", f"{filler} {long} {filler}", created_at=at),
        ],
    )
    tail = await store.fetch_since(key, 0)
    marked = ChatMessage("system", f"summary {summ}", metadata={"chatlayers": {"summary": True}})
    messages = (marked,)
    cp = SummaryCheckpoint(messages, tail.seqs[-1], tail.head.epoch, "test", at)
    assert await store.save_checkpoint(key, cp, expected_version=0) is not None
    await store.save_record(key, ConversationRecord("note", {"text": record}))


def assert_gone(path: Path, tags: Iterable[str], *, records: bool = True) -> None:
    blob = raw(path)
    for tag in tags:
        for word in markers(tag)[: None if records else 3]:
            assert word.encode() not in blob, f"{word} still in the files"
            assert word.upper().encode() not in blob


def assert_kept(path: Path, tags: Iterable[str]) -> None:
    blob = raw(path)
    for tag in tags:
        for word in markers(tag):
            assert word.encode() in blob, f"{word} should still be stored"


Erase = Callable[[SQLiteChatStorage, Path], Awaitable[object]]


async def purge(store: SQLiteChatStorage, path: Path) -> None:
    async with SQLiteChatStorage(path, retention="7d") as keeper:
        assert await keeper.purge(now=T0 + timedelta(days=10)) == 4


@pytest.mark.parametrize(
    ("erase", "gone", "kept"),
    [
        (lambda s, _: s.delete(ChatKey("ann", "s1", "a")), ["ann1"], ["ann2", "bob1"]),
        (lambda s, _: s.delete_user("ann"), ["ann1", "ann2"], ["bob1"]),
        (purge, ["ann1", "bob1"], ["ann2"]),
    ],
    ids=["delete", "delete_user", "purge"],
)
async def test_erased_text_is_in_no_file(
    tmp_path: Path, erase: Erase, gone: list[str], kept: list[str]
) -> None:
    path = tmp_path / "chats.db"
    async with SQLiteChatStorage(path) as store, SQLiteChatStorage(path) as reader:
        await fill(store, ChatKey("ann", "s1", "a"), "ann1", T0 - timedelta(days=30))
        await fill(store, ChatKey("ann", "s2", "a"), "ann2", T0 + timedelta(days=9))
        await fill(store, ChatKey("bob", "s1", "a"), "bob1", T0 - timedelta(days=30))
        # The search index holds every message's words; a second connection has read it all.
        for user in ("ann", "bob"):
            assert await store.search(user, "secret")
            assert await reader.search(user, "filler7")
            await reader.fetch_all_chats(user, "s1")
        assert len(files(path)) == 3  # main, -wal, -shm
        assert_kept(path, [*gone, *kept])
        await erase(store, path)
        # A retention purge deletes old messages and their checkpoints; records stay (as on
        # every store: they are not messages).
        assert_gone(path, gone, records=erase is not purge)
        assert_kept(path, kept)
        # And nothing erased is served any more, by either instance.
        for user in ("ann", "bob"):
            for hit in await reader.search(user, "secret"):
                assert not any(m in hit.message.text for t in gone for m in markers(t))
    assert_gone(path, gone, records=erase is not purge)


async def test_wal_is_empty_after_erasure_even_with_a_reader_between_calls(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chats.db"
    key = ChatKey("ann", "s", "a")
    async with SQLiteChatStorage(path) as store, SQLiteChatStorage(path) as reader:
        await fill(store, key, "x1")
        assert await reader.fetch(key)
        await store.delete(key)
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size == 0
        assert_gone(path, ["x1"])
        assert await reader.fetch(key) == []


async def test_an_erasure_a_reader_holds_back_says_where_copies_remain_and_a_retry_finishes(
    tmp_path: Path,
) -> None:
    """Another process in a long read transaction (an older snapshot) keeps the log from
    being copied and emptied: the rows are deleted, the error says copies remain in the
    database file and its -wal, and the same call once the reader is done erases them."""
    import sqlite3

    from storage.errors import StorageUnavailableError

    path = tmp_path / "chats.db"
    key = ChatKey("ann", "s", "a")
    async with SQLiteChatStorage(path, busy_timeout=0.05) as store:
        await fill(store, key, "held1")
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] > 0
        with pytest.raises(StorageUnavailableError, match="the database file and its -wal"):
            await store.delete_user("ann")
        assert await store.fetch(key) == []  # deleted all the same
        reader.execute("COMMIT")
        reader.close()
        await store.delete_user("ann")  # the retry the error asks for
        assert_gone(path, ["held1"])


def test_a_reader_on_the_newest_snapshot_leaves_copies_in_the_wal_only(tmp_path: Path) -> None:
    """A reader that began after the delete keeps the log from being emptied but not from
    being copied: the database file no longer holds the erased text, and the error says so."""
    import sqlite3

    from storage.errors import StorageUnavailableError
    from storage.stores.sqlite.writes import wipe_wal

    path = tmp_path / "w.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA secure_delete=ON")
    conn.execute("PRAGMA busy_timeout=50")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.execute("INSERT INTO t VALUES (?)", ("markerzq " * 50,))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert b"markerzq" in path.read_bytes()  # the text is in the main file (the grep works)
    conn.execute("DELETE FROM t")
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM t").fetchone()[0] == 0  # the newest snapshot
    with pytest.raises(StorageUnavailableError, match=r"the -wal file \(not the database file\)"):
        wipe_wal(conn, "test", 0.05)
    assert b"markerzq" not in path.read_bytes()
    reader.execute("COMMIT")
    wipe_wal(conn, "test", 0.05)
    assert b"markerzq" not in raw(path)
    reader.close()
    conn.close()


class _BusyThenFree:
    """A connection whose checkpoint answers busy ``times`` times at once (as SQLite does,
    without its busy handler, while another connection checkpoints)."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.calls = 0

    def execute(self, sql: str) -> _BusyThenFree:
        assert sql == "PRAGMA wal_checkpoint(TRUNCATE)"
        self.calls += 1
        return self

    def fetchone(self) -> tuple[int, int, int]:
        return (1 if self.calls <= self.times else 0, 0, 0)


def test_truncating_the_wal_retries_an_immediate_busy_until_its_deadline() -> None:
    import sqlite3
    import typing

    from storage.stores.sqlite.wal import truncate_wal

    freed = _BusyThenFree(5)
    assert truncate_wal(typing.cast(sqlite3.Connection, freed), 2.0)
    assert freed.calls == 6  # three attempts in a row, as before, would have given up
    never = _BusyThenFree(10**9)
    assert not truncate_wal(typing.cast(sqlite3.Connection, never), 0.05)
    assert 2 <= never.calls < 100  # paused between attempts, stopped at the deadline
