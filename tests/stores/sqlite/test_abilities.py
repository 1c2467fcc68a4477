"""SQLite store: every ability of ``storage.abilities``, with the memory store's semantics.

Heads and tails, checkpoints (compare-and-set) and leases (injected clock), replace and
conditional saves, session listing from an index, FTS5 search, records, retention; two store
instances over one file see each other's writes, heads, checkpoints and leases.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest

from storage.abilities import (
    ABILITIES,
    ConversationRecord,
    Head,
    SummaryCheckpoint,
    find_ability,
)
from storage.errors import (
    ConfigError,
    ConflictError,
    InvalidArgumentError,
    InvalidMessageError,
    StorageUnavailableError,
)
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SUMMARY = {"chatlayers": {"summary": True}}


class Clock:
    """An injected clock: seconds since the Unix epoch, moved by hand."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start.timestamp()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def msg(text: str, at: datetime = T0, role: str = "user") -> ChatMessage:
    return ChatMessage(role, text, created_at=at)


def summary(text: str = "the story so far") -> ChatMessage:
    return ChatMessage("system", text, metadata=SUMMARY, created_at=T0)


def make_checkpoint(
    messages: tuple[ChatMessage, ...], covers_to: int, epoch: str, at: datetime = T0
) -> SummaryCheckpoint:
    return SummaryCheckpoint(messages, covers_to, epoch, "test", at)


def checkpoint(covers_to: int, epoch: str, text: str = "so far") -> SummaryCheckpoint:
    return make_checkpoint((summary(text),), covers_to, epoch)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "chats.db"


async def test_every_ability_is_declared(path: Path) -> None:
    async with SQLiteChatStorage(path) as store:
        for ability in ABILITIES:
            assert find_ability(store, ability) is store, ability.__name__


# --- SequencedStorage ----------------------------------------------------------------------


async def test_head_and_fetch_since(path: Path) -> None:
    async with SQLiteChatStorage(path) as store:
        assert await store.head(KEY) == Head(0, "", 0)
        assert (await store.fetch_since(KEY, 0)).messages == ()
        first = [msg("a"), msg("b"), msg("c")]
        await store.save_messages(KEY, first)
        head = await store.head(KEY)
        assert head.epoch
        assert head.last_seq >= 3
        assert head.checkpoint_version == 0
        tail = await store.fetch_since(KEY, 0)
        assert tail.messages == tuple(first)
        assert tail.head == head
        assert list(tail.seqs) == sorted(tail.seqs)
        assert tail.seqs[-1] == head.last_seq
        await store.save(KEY, msg("d"))
        later = await store.fetch_since(KEY, tail.seqs[-1])
        assert [m.content for m in later.messages] == ["d"]
        assert later.head.epoch == head.epoch
        assert later.head.last_seq == later.seqs[0]
        assert (await store.fetch_since(KEY, later.head.last_seq)).messages == ()
        # Another key's writes never move this key's head.
        await store.save(ChatKey("u", "s", "b"), msg("x"))
        assert await store.head(KEY) == later.head
        with pytest.raises(InvalidArgumentError):
            await store.fetch_since(KEY, -1)
        with pytest.raises(InvalidArgumentError):
            await store.fetch_since(KEY, True)


async def test_epoch_changes_whenever_messages_are_removed(path: Path) -> None:
    clock = Clock()
    async with SQLiteChatStorage(path, retention="1d", clock=clock) as store:
        await store.save_messages(KEY, [msg("a"), msg("b")])
        epochs = [(await store.head(KEY)).epoch]
        await store.save(KEY, msg("c"))
        assert (await store.head(KEY)).epoch == epochs[0]  # appends keep the epoch
        await store.replace(KEY, [msg("r")])
        epochs.append((await store.head(KEY)).epoch)
        await store.delete(KEY)
        assert await store.head(KEY) == Head(0, "", 0)
        await store.save(KEY, msg("again", at=T0 - timedelta(days=2)))
        await store.save(KEY, msg("fresh", at=T0))
        epochs.append((await store.head(KEY)).epoch)
        assert await store.purge() == 1
        epochs.append((await store.head(KEY)).epoch)
        assert "" not in epochs
        assert len(set(epochs)) == len(epochs)


# --- CheckpointStorage ---------------------------------------------------------------------


async def test_checkpoint_compare_and_set(path: Path) -> None:
    async with SQLiteChatStorage(path) as store:
        assert await store.load_checkpoint(KEY) is None
        assert await store.save_checkpoint(KEY, checkpoint(1, "e"), expected_version=0) is None
        await store.save_messages(KEY, [msg("a"), msg("b"), msg("c")])
        tail = await store.fetch_since(KEY, 0)
        epoch = tail.head.epoch
        first = await store.save_checkpoint(
            KEY, checkpoint(tail.seqs[1], epoch), expected_version=0
        )
        assert first is not None
        assert first.version == 1
        assert await store.load_checkpoint(KEY) == first
        assert (await store.head(KEY)).checkpoint_version == 1
        # A stale version, another epoch, or a sequence the record does not hold: refused.
        assert (
            await store.save_checkpoint(KEY, checkpoint(tail.seqs[2], epoch), expected_version=0)
            is None
        )
        assert (
            await store.save_checkpoint(KEY, checkpoint(tail.seqs[2], "other"), expected_version=1)
            is None
        )
        assert (
            await store.save_checkpoint(KEY, checkpoint(10**9, epoch), expected_version=1) is None
        )
        assert await store.load_checkpoint(KEY) == first
        second = await store.save_checkpoint(
            KEY, checkpoint(tail.seqs[2], epoch, "v2"), expected_version=1
        )
        assert second is not None
        assert second.version == 2
        loaded = await store.load_checkpoint(KEY)
        assert loaded == second
        assert loaded.messages[0].content == "v2"
        # Never part of the raw record.
        assert await store.fetch(KEY) == list(tail.messages)
        assert all(not m.message.is_summary for m in await store.fetch_all_chats("u", "s"))
        bad = make_checkpoint((msg("not marked"),), tail.seqs[2], epoch)
        with pytest.raises(InvalidMessageError):
            await store.save_checkpoint(KEY, bad, expected_version=2)
        with pytest.raises(InvalidArgumentError):
            await store.save_checkpoint(KEY, checkpoint(tail.seqs[2], epoch), expected_version=-1)
        # Replace drops it; delete erases it.
        await store.replace(KEY, [msg("new")])
        assert await store.load_checkpoint(KEY) is None
        assert (await store.head(KEY)).checkpoint_version == 0


async def test_leases_expire_by_the_injected_clock(path: Path) -> None:
    clock = Clock()
    async with SQLiteChatStorage(path, clock=clock) as a, SQLiteChatStorage(path, clock=clock) as b:
        assert await a.acquire_lease(KEY, "w1", 30)
        assert not await b.acquire_lease(KEY, "w2", 30)  # another instance, same file
        assert await a.acquire_lease(KEY, "w1", 30)  # re-acquire extends
        clock.advance(29)
        assert not await b.acquire_lease(KEY, "w2", 30)
        clock.advance(2)  # w1 died: its lease ran out
        assert await b.acquire_lease(KEY, "w2", 30)
        await a.release_lease(KEY, "w1")  # not the holder: a no-op
        assert not await a.acquire_lease(KEY, "w1", 30)
        await b.release_lease(KEY, "w2")
        assert await a.acquire_lease(KEY, "w1", 30)
        assert await a.acquire_lease(ChatKey("u", "s", "other"), "w2", 30)  # per key
        with pytest.raises(InvalidArgumentError):
            await a.acquire_lease(KEY, "", 30)
        with pytest.raises(InvalidArgumentError):
            await a.acquire_lease(KEY, "w1", 0)
        await a.delete(KEY)
        assert await b.acquire_lease(KEY, "w2", 30)  # erased with the conversation


# --- ReplaceableStorage --------------------------------------------------------------------


async def test_replace_is_atomic_and_validated(path: Path) -> None:
    async with SQLiteChatStorage(path) as store:
        await store.save_messages(KEY, [msg("a"), msg("b")])
        await store.save_record(KEY, ConversationRecord("status", {"s": 1}))
        before = await store.head(KEY)
        call = ToolCall("c1", "f", "{}")
        history = [
            msg("q"),
            ChatMessage("assistant", None, tool_calls=(call,), created_at=T0),
            ChatMessage("tool", "done", tool_call_id="c1", created_at=T0),
        ]
        with pytest.raises(InvalidMessageError):
            await store.replace(KEY, [history[0], history[2]])  # orphaned result
        assert [m.content for m in await store.fetch(KEY)] == ["a", "b"]
        assert await store.head(KEY) == before
        stored = await store.replace(KEY, history)
        assert stored == history == await store.fetch(KEY)
        after = await store.head(KEY)
        assert after.epoch != before.epoch
        assert after.last_seq > before.last_seq
        assert len(await store.fetch_records(KEY)) == 1  # records are not messages
        # Ids of the old record may come back.
        again = await store.replace(KEY, [*history, msg("a")])
        assert len(again) == 4
        assert await store.replace(KEY, []) == []
        assert await store.head(KEY) == Head(0, "", 0)
        assert await store.list_keys() == []


async def test_save_messages_if_detects_a_stale_writer(path: Path) -> None:
    async with SQLiteChatStorage(path) as a, SQLiteChatStorage(path) as b:
        empty = (await a.head(KEY)).version
        assert await a.save_messages_if(KEY, [msg("1")], expected_version=empty)
        version = (await a.head(KEY)).version
        await b.save(KEY, msg("from b"))  # another writer
        with pytest.raises(ConflictError):
            await a.save_messages_if(KEY, [msg("lost")], expected_version=version)
        assert [m.content for m in await a.fetch(KEY)] == ["1", "from b"]
        current = (await b.head(KEY)).version
        assert await a.save_messages_if(KEY, [], expected_version=current) == []
        with pytest.raises(ConflictError):
            await a.save_messages_if(KEY, [], expected_version=version)
        stored = await a.save_messages_if(KEY, [msg("2")], expected_version=current)
        assert [m.content for m in stored] == ["2"]
        with pytest.raises(InvalidMessageError):  # bad input wins over a conflict
            await a.save_messages_if(KEY, [ChatMessage("robot", "x")], expected_version="x")


# --- SessionListing ------------------------------------------------------------------------


async def test_sessions_listing_pages_newest_first(path: Path) -> None:
    memory = InMemoryChatStorage()
    async with SQLiteChatStorage(path) as store:
        for n in range(7):
            at = T0 + timedelta(minutes=n % 4)  # ties in last_at
            for target in (store, memory):
                await target.save(ChatKey("u", f"s{n}", "a"), msg(f"m{n}", at))
                if n % 2:
                    await target.save(
                        ChatKey("u", f"s{n}", "b"), msg(f"x{n}", at - timedelta(hours=1))
                    )
                await target.save(ChatKey("other", f"s{n}", "a"), msg("not yours", at))
        seen = []
        cursor = None
        while True:
            page = await store.list_sessions("u", limit=3, cursor=cursor)
            ref = await memory.list_sessions("u", limit=3, cursor=cursor)
            assert page == ref
            seen += [s.session_id for s in page.sessions]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert sorted(seen) == [f"s{n}" for n in range(7)]
        assert len(seen) == 7
        first = (await store.list_sessions("u", limit=1)).sessions[0]
        assert first.session_id == "s3"
        assert first.agents == ("a", "b")
        assert first.message_count == 2
        assert first.first_at == T0 + timedelta(minutes=3) - timedelta(hours=1)
        # Kept on delete.
        await store.delete(ChatKey("u", "s3", "b"))
        info = (await store.list_sessions("u", limit=1)).sessions[0]
        assert info.agents == ("a",)
        assert info.message_count == 1
        await store.delete_user("u")
        assert (await store.list_sessions("u")).sessions == ()
        with pytest.raises(InvalidArgumentError):
            await store.list_sessions("other", limit=0)
        with pytest.raises(InvalidArgumentError):
            await store.list_sessions("other", cursor="not a cursor")


async def test_sessions_listing_reads_an_index_not_the_messages(path: Path) -> None:
    from storage.stores.sqlite import sessions

    async with SQLiteChatStorage(path) as store:
        await store.save(KEY, msg("x"))
        conn = store._conn
        for query, params in (
            (sessions.FIRST_PAGE, ("u", 51)),
            (sessions.NEXT_PAGE, ("u", 1, 1, "s", 51)),
        ):
            plan = " | ".join(
                row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", params)
            )
            assert "sessions_by_activity" in plan, plan
            assert "messages" not in plan, plan
            assert "TEMP B-TREE" not in plan, plan


# --- SearchableStorage ---------------------------------------------------------------------


async def test_search_is_user_scoped_ranked_and_in_sync(path: Path) -> None:
    clock = Clock()
    async with SQLiteChatStorage(path, retention="30d", clock=clock) as store:
        other = ChatKey("v", "s", "a")
        await store.save_messages(
            KEY,
            [
                msg("Where is my Café order?"),
                msg("the order number is 42 and the order is late", T0 + timedelta(seconds=1)),
                msg("nothing relevant here"),
            ],
        )
        await store.save(other, msg("my order is someone else's"))
        hits = await store.search("u", "order")
        assert [h.message.content for h in hits] == [
            "the order number is 42 and the order is late",
            "Where is my Café order?",
        ]
        assert all(h.key.user_id == "u" for h in hits)
        assert hits[0].score >= hits[1].score
        assert "order" in hits[0].snippet
        assert [h.message.content for h in await store.search("u", "cafe")] == [
            "Where is my Café order?"
        ]
        assert await store.search("u", "order", limit=1) == hits[:1]
        # FTS5 syntax in what a user typed is just words.
        for query in [
            '"order',
            "order*",
            "NEAR(order",
            "order AND",
            "-order",
            "{a b}: order",
            "^order",
            "a:b",
        ]:
            found = await store.search("u", query)
            assert all(h.key.user_id == "u" for h in found)
        with pytest.raises(InvalidArgumentError):
            await store.search("u", "  ... ")
        with pytest.raises(InvalidArgumentError):
            await store.search("u", "order", limit=0)
        # In step with writes made through another instance, deletes, replace and purge.
        async with SQLiteChatStorage(path) as writer:
            await writer.save(ChatKey("u", "s2", "a"), msg("a second order arrives"))
            assert len(await store.search("u", "order")) == 3
            await writer.delete(ChatKey("u", "s2", "a"))
        assert len(await store.search("u", "order")) == 2
        await store.replace(KEY, [msg("replaced text only")])
        assert await store.search("u", "order") == []
        assert len(await store.search("u", "replaced")) == 1
        await store.save(KEY, msg("old order", T0 - timedelta(days=40)))
        assert len(await store.search("u", "order")) == 1
        await store.purge()
        assert await store.search("u", "order") == []
        await store.delete_user("v")
        assert await store.search("v", "order") == []


async def test_search_matches_what_the_memory_store_finds(path: Path) -> None:
    texts = ["alpha beta", "beta gamma", "gamma delta alpha", "ALPHA", "über straße", "tool_call x"]
    memory = InMemoryChatStorage()
    async with SQLiteChatStorage(path) as store:
        for n, text in enumerate(texts):
            message = msg(text, T0 + timedelta(seconds=n))
            for target in (store, memory):
                await target.save(ChatKey("u", "s", f"a{n % 2}"), message)
        for query in ["alpha", "gamma beta", "uber", "STRASSE", "tool_call", "zeta", "alpha delta"]:
            mine = {h.message.id for h in await store.search("u", query)}
            ref = {h.message.id for h in await memory.search("u", query)}
            assert mine == ref, query


# --- RecordStorage -------------------------------------------------------------------------


async def test_records_interleave_with_messages_and_never_reach_fetch(path: Path) -> None:
    clock = Clock()
    async with SQLiteChatStorage(path, clock=clock) as store, SQLiteChatStorage(path) as other:
        approval = ConversationRecord(
            "tool_approval", {"tool_call_id": "c1", "decision": "approved"}
        )
        stored = await store.save_record(KEY, approval)  # before any message: a fresh sequence
        await store.save(KEY, msg("a"))
        status = await other.save_record(KEY, ConversationRecord("status", {"n": [1, {"x": None}]}))
        await store.save(KEY, msg("b"))
        assert stored.created_at == datetime.fromtimestamp(clock(), UTC)
        assert await store.save_record(KEY, approval) == stored  # idempotent by id
        tail = await store.fetch_since(KEY, 0)
        assert stored.seq < tail.seqs[0] < status.seq < tail.seqs[1]
        assert await store.fetch_records(KEY) == [stored, status]
        assert await other.fetch_records(KEY, kind="tool_approval") == [stored]
        assert [m.content for m in await store.fetch(KEY)] == ["a", "b"]
        assert len(await store.fetch_all_chats("u", "s")) == 2
        assert (await store.head(KEY)).last_seq == tail.seqs[1]
        with pytest.raises(InvalidArgumentError):
            await store.save_record(KEY, ConversationRecord("", {}))
        await store.delete(KEY)
        assert await store.fetch_records(KEY) == []


# --- RetentionStorage ----------------------------------------------------------------------


async def test_purge_by_retention_with_an_injected_clock(path: Path) -> None:
    clock = Clock()
    async with SQLiteChatStorage(path, retention="1d", purge_interval="1h", clock=clock) as store:
        old, new = T0 - timedelta(days=2), T0 - timedelta(hours=1)
        other = ChatKey("u", "s", "b")
        await store.save_messages(KEY, [msg("old1", old), msg("new1", new)])
        await store.save(other, msg("old2", old))  # auto purge ran at the first save already
        tail = await store.fetch_since(KEY, 0)
        assert [m.content for m in tail.messages] == ["new1"]
        # Within the interval, writes do not purge again.
        await store.save(other, msg("old3", old))
        assert len(await store.fetch(other)) == 2
        cp = await store.save_checkpoint(
            KEY, checkpoint(tail.seqs[0], tail.head.epoch), expected_version=0
        )
        assert cp is not None
        clock.advance(3601)
        await store.save(KEY, msg("new2", T0 + timedelta(hours=1)))  # the interval passed
        assert await store.fetch(other) == []
        assert await store.list_keys() == [KEY]
        assert [s.message_count for s in (await store.list_sessions("u")).sessions] == [2]
        # An explicit purge with ``now``: the checkpoint of a touched key goes, the epoch moves.
        before = await store.head(KEY)
        assert await store.purge(now=T0 + timedelta(days=1)) == 1
        after = await store.head(KEY)
        assert after.epoch != before.epoch
        assert after.checkpoint_version == 0
        assert await store.load_checkpoint(KEY) is None
        assert [m.content for m in await store.fetch(KEY)] == ["new2"]
        assert await store.purge(now=T0 + timedelta(days=1)) == 0
        with pytest.raises(InvalidArgumentError):
            await store.purge(now=datetime(2025, 1, 1))  # naive
    async with SQLiteChatStorage(path) as keep_forever:
        assert await keep_forever.purge(now=T0 + timedelta(days=999)) == 0


# --- construction, describe, production shapes --------------------------------------------


async def test_from_url_and_describe(tmp_path: Path) -> None:
    store = SQLiteChatStorage.from_url(f"sqlite:///{tmp_path}/x.db?retention=30d", retention="30d")
    assert store.path == f"{tmp_path}/x.db"
    assert store.retention == 30 * 86400
    assert store.describe() == f"sqlite:///{tmp_path}/x.db (synchronous=normal, retention=30d)"
    assert SQLiteChatStorage.from_url("sqlite://:memory:").path == ":memory:"
    assert SQLiteChatStorage("/abs/x.db").describe() == "sqlite:////abs/x.db (synchronous=normal)"
    with pytest.raises(ConfigError, match=re.escape("sqlite:///x.db")):
        SQLiteChatStorage.from_url("sqlite://x.db")
    with pytest.raises(ConfigError):
        SQLiteChatStorage.from_url("sqlite:///x.db?bogus=1", bogus=1)
    with pytest.raises(InvalidArgumentError):
        SQLiteChatStorage(tmp_path / "y.db", synchronous="sometimes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        SQLiteChatStorage(tmp_path / "y.db", retention="soon")
    assert not (tmp_path / "x.db").exists()  # nothing opened yet


async def test_driver_errors_and_closed_store(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageUnavailableError) as info:
        await SQLiteChatStorage(bad).fetch(KEY)
    assert not isinstance(info.value.__cause__, StorageUnavailableError)
    store = SQLiteChatStorage(tmp_path / "x.db")
    await store.save(KEY, msg("a"))
    await store.aclose()
    assert store.closed
    for call in (
        store.fetch(KEY),
        store.head(KEY),
        store.search("u", "a"),
        store.list_sessions("u"),
    ):
        with pytest.raises(StorageUnavailableError):
            await call


async def test_two_instances_over_one_file_see_everything(path: Path) -> None:
    clock = Clock()
    async with SQLiteChatStorage(path, clock=clock) as a, SQLiteChatStorage(path, clock=clock) as b:
        await a.save_messages(KEY, [msg("1"), msg("2")])
        assert await b.fetch(KEY) == await a.fetch(KEY)
        assert await b.head(KEY) == await a.head(KEY)
        tail = await b.fetch_since(KEY, 0)
        cp = await b.save_checkpoint(
            KEY, checkpoint(tail.seqs[-1], tail.head.epoch), expected_version=0
        )
        assert cp is not None
        assert await a.load_checkpoint(KEY) == cp
        assert (await a.head(KEY)).checkpoint_version == 1
        # Both try the same compare-and-set: one wins.
        results = [
            await a.save_checkpoint(
                KEY, checkpoint(tail.seqs[-1], tail.head.epoch, "A"), expected_version=1
            ),
            await b.save_checkpoint(
                KEY, checkpoint(tail.seqs[-1], tail.head.epoch, "B"), expected_version=1
            ),
        ]
        assert [r is not None for r in results] == [True, False]
        assert await a.acquire_lease(KEY, "a", 10)
        assert not await b.acquire_lease(KEY, "b", 10)
        await b.save(KEY, msg("3"))
        assert [m.content for m in await a.fetch(KEY, limit=1)] == ["3"]
        assert (await a.list_sessions("u")).sessions[0].message_count == 3
        await b.delete(KEY)
        assert await a.fetch(KEY) == []
        assert await a.head(KEY) == Head(0, "", 0)
        assert await a.load_checkpoint(KEY) is None


async def test_stored_messages_round_trip_through_checkpoint_and_tail(path: Path) -> None:
    rich = ChatMessage.from_openai(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
            ],
        },
        created_at=T0,
    )
    async with SQLiteChatStorage(path) as store:
        await store.save_messages(KEY, [msg("q"), rich])
        tail = await store.fetch_since(KEY, 0)
        assert tail.messages[1] == rich
        assert tail.messages[1].to_openai() == rich.to_openai()
        marked = attrs.evolve(rich, metadata=SUMMARY, id="s1")
        cp = make_checkpoint((marked,), tail.seqs[1], tail.head.epoch, T0 + timedelta(hours=2))
        stored = await store.save_checkpoint(KEY, cp, expected_version=0)
        assert stored is not None
        loaded = await store.load_checkpoint(KEY)
        assert loaded == stored
        assert loaded.messages[0].to_openai() == rich.to_openai()


async def test_search_indexes_a_backlog_in_bounded_transactions(path: Path) -> None:
    from storage.stores.sqlite import fts

    async with SQLiteChatStorage(path) as store:
        await store.save_messages(KEY, [msg(f"backlog item {n}") for n in range(12)])
        conn = store._conn
        assert fts.stale(conn)
        assert fts.indexed_to(conn) == 0
        conn.execute("BEGIN IMMEDIATE")
        fts.catch_up(conn, most=5)
        conn.execute("COMMIT")
        tail = await store.fetch_since(KEY, 0)
        assert fts.indexed_to(conn) == tail.seqs[4]  # five rows, one transaction
        assert len(await store.search("u", "backlog", limit=50)) == 12
        assert not fts.stale(conn)
        assert fts.indexed_to(conn) == tail.head.last_seq


async def test_a_failed_write_leaves_messages_and_tallies_as_they_were(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from storage.stores.sqlite import tallies

    async with SQLiteChatStorage(path) as store:
        await store.save(KEY, msg("kept"))
        before = (await store.head(KEY), await store.list_sessions("u"))

        def broken(*args: object) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(tallies, "add", broken)
        with pytest.raises(StorageUnavailableError) as info:
            await store.save_messages(KEY, [msg("lost 1"), msg("lost 2")])
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        with pytest.raises(StorageUnavailableError):
            await store.replace(KEY, [msg("lost 3")])
        monkeypatch.undo()
        assert [m.content for m in await store.fetch(KEY)] == ["kept"]
        assert (await store.head(KEY), await store.list_sessions("u")) == before
        assert not store._conn.in_transaction
        assert [m.content for m in await store.save(KEY, msg("next"))] == ["next"]


def test_missing_parent_directories_are_all_created_private(tmp_path: Path) -> None:
    import stat

    from storage.stores.sqlite.connection import _make_private_dirs

    target = tmp_path / "a" / "b" / "c"
    _make_private_dirs(target)
    for directory in (tmp_path / "a", tmp_path / "a" / "b", target):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
