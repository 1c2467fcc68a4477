"""Every ability of storage.abilities on RedisChatStorage, on one server AND on a 3-node Cluster.

Semantics are compared with the in-memory store (the reference implementation) where the
result is deterministic; Redis specifics (one round trip for ``head``/``fetch``/
``fetch_since``, where the checkpoint lives, lease expiry by the server) are checked here.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from storage.abilities import (
    CheckpointStorage,
    ConversationRecord,
    Head,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    SummaryCheckpoint,
    encode_session_cursor,
)
from storage.errors import (
    ConflictError,
    InvalidArgumentError,
    InvalidMessageError,
)
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from storage.stores.redis import RedisChatStorage, scripts

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.redis

T0 = datetime(2024, 5, 1, tzinfo=UTC)
SUMMARY = {"chatlayers": {"summary": True}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's asyncio client


@pytest.fixture(params=["single", "cluster"])
def url_and_cluster(request: pytest.FixtureRequest) -> tuple[str, bool]:
    if request.param == "single":
        return request.getfixturevalue("redis_url"), False
    return request.getfixturevalue("redis_cluster_url"), True


@pytest.fixture
async def store(url_and_cluster: tuple[str, bool]) -> AsyncIterator[RedisChatStorage]:
    url, cluster = url_and_cluster
    async with RedisChatStorage(url, prefix=f"ab-{uuid.uuid4().hex[:10]}", cluster=cluster) as s:
        yield s


def msg(text: str, n: int = 0, role: str = "user", **kwargs: Any) -> ChatMessage:
    return ChatMessage(role, text, created_at=T0 + timedelta(seconds=n), **kwargs)


def summary(text: str = "the summary") -> ChatMessage:
    return ChatMessage("system", text, metadata=SUMMARY)


def checkpoint(covers_to: int, epoch: str, text: str = "the summary") -> SummaryCheckpoint:
    return SummaryCheckpoint(
        messages=(summary(text),),
        covers_to=covers_to,
        epoch=epoch,
        summarizer="test",
        created_at=T0,
    )


class Calls:
    """Counts the commands a client sends (a round trip each, pipelines aside)."""

    def __init__(self, store: RedisChatStorage, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        self.args: list[tuple[Any, ...]] = []
        client = store._client
        original = client.execute_command

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.names.append(str(args[0]).upper())
            self.args.append(args)
            return await original(*args, **kwargs)

        monkeypatch.setattr(client, "execute_command", counted)


def test_every_ability_is_declared() -> None:
    s = RedisChatStorage("redis://127.0.0.1:1/0")
    for ability in (
        SequencedStorage,
        CheckpointStorage,
        ReplaceableStorage,
        SessionListing,
        SearchableStorage,
        RecordStorage,
        RetentionStorage,
    ):
        assert isinstance(s, ability), ability


# --------------------------------------------------------------------------- sequenced


@pytest.mark.anyio
async def test_head_and_fetch_since(store: RedisChatStorage) -> None:
    key = ChatKey("u", "s", "a")
    assert await store.head(key) == Head(0, "", 0)
    tail = await store.fetch_since(key, 0)
    assert (tail.head, tail.seqs, tail.messages) == (Head(0, "", 0), (), ())
    batch = [msg(f"m{n}", n) for n in range(100)]  # past the script's first 16-entry read
    await store.save_messages(key, batch[:60])
    await store.save_messages(key, batch[60:])
    head = await store.head(key)
    assert head.epoch
    assert head.checkpoint_version == 0
    full = await store.fetch_since(key, 0)
    assert full.head == head
    assert list(full.messages) == await store.fetch(key)
    assert list(full.seqs) == sorted(set(full.seqs))
    assert full.seqs[-1] == head.last_seq
    assert head.version == f"{head.epoch}.{head.last_seq}"
    for cut in (0, 5, 39, 84, 98, 99):
        tail = await store.fetch_since(key, full.seqs[cut])
        assert tail.messages == full.messages[cut + 1 :]
        assert tail.seqs == full.seqs[cut + 1 :]
    assert (await store.fetch_since(key, head.last_seq)).messages == ()
    # Another key of the same session shares the counter, never the record.
    other = ChatKey("u", "s", "b")
    await store.save(other, msg("other", 200))
    assert (await store.head(other)).last_seq > head.last_seq
    assert (await store.head(key)) == head
    with pytest.raises(InvalidArgumentError):
        await store.fetch_since(key, -1)
    with pytest.raises(InvalidArgumentError):
        await store.fetch_since(key, True)


@pytest.mark.anyio
async def test_seqs_never_reused_and_epoch_changes_on_removal(store: RedisChatStorage) -> None:
    key = ChatKey("u", "s", "a")
    await store.save_messages(key, [msg("1"), msg("2")])
    first = await store.head(key)
    await store.save(key, msg("3"))
    second = await store.head(key)
    assert second.epoch == first.epoch
    assert second.last_seq > first.last_seq
    await store.save(key, msg("3-again", id=(await store.fetch(key))[-1].id))  # idempotent
    assert await store.head(key) == second
    await store.delete(key)
    assert await store.head(key) == Head(0, "", 0)
    await store.save(key, msg("4"))
    third = await store.head(key)
    assert third.epoch not in ("", first.epoch)


@pytest.mark.anyio
async def test_reads_are_one_round_trip(
    store: RedisChatStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = ChatKey("u", "s", "a")
    await store.save_messages(key, [msg(f"m{n}", n) for n in range(30)])
    await store.head(key)  # the Cluster client discovers its nodes on first use
    calls = Calls(store, monkeypatch)
    await store.head(key)
    assert calls.names == ["HMGET"]
    await store.fetch(key)
    await store.fetch(key, limit=3)
    assert calls.names[1:] == ["EVALSHA", "EVALSHA"]
    await store.fetch_since(key, 10)
    assert calls.names[3:] == ["EVALSHA"]


# --------------------------------------------------------------------------- checkpoints


@pytest.mark.anyio
async def test_checkpoint_compare_and_set(store: RedisChatStorage) -> None:
    key = ChatKey("u", "s", "a")
    assert await store.load_checkpoint(key) is None
    await store.save_messages(key, [msg(f"m{n}", n) for n in range(6)])
    head = await store.head(key)
    seqs = (await store.fetch_since(key, 0)).seqs
    assert (
        await store.save_checkpoint(key, checkpoint(seqs[3], "other"), expected_version=0) is None
    )
    assert (
        await store.save_checkpoint(
            key, checkpoint(head.last_seq + 1, head.epoch), expected_version=0
        )
        is None
    )
    first = await store.save_checkpoint(key, checkpoint(seqs[3], head.epoch), expected_version=0)
    assert first is not None
    assert first.version == 1
    assert await store.load_checkpoint(key) == first
    assert (await store.head(key)).checkpoint_version == 1
    # Stored apart: never in fetch, fetch_since or fetch_all_chats.
    assert [m.text for m in await store.fetch(key)] == [f"m{n}" for n in range(6)]
    assert len((await store.fetch_since(key, 0)).messages) == 6
    assert len(await store.fetch_all_chats("u", "s")) == 6
    # A stale writer loses; nothing written.
    assert (
        await store.save_checkpoint(
            key, checkpoint(seqs[4], head.epoch, "late"), expected_version=0
        )
        is None
    )
    second = await store.save_checkpoint(
        key, checkpoint(seqs[5], head.epoch, "b"), expected_version=1
    )
    assert second is not None
    assert second.version == 2
    assert (await store.load_checkpoint(key)) == second
    # covers_to must be a sequence number the key holds (another key's is refused).
    other = ChatKey("u", "s", "b")
    await store.save(other, msg("x", 9))
    foreign = (await store.head(other)).last_seq
    await store.save(key, msg("m6", 10))
    assert (
        await store.save_checkpoint(key, checkpoint(foreign, head.epoch), expected_version=2)
        is None
    )
    bad = SummaryCheckpoint((ChatMessage("system", "x"),), seqs[1], head.epoch, "t", T0)
    with pytest.raises(InvalidMessageError):
        await store.save_checkpoint(key, bad, expected_version=2)
    with pytest.raises(InvalidArgumentError):
        await store.save_checkpoint(key, checkpoint(seqs[1], head.epoch), expected_version=-1)
    assert (await store.load_checkpoint(key)) == second


@pytest.mark.anyio
async def test_checkpoint_of_an_older_epoch_is_void(store: RedisChatStorage) -> None:
    key = ChatKey("u", "s", "a")
    await store.save_messages(key, [msg("1"), msg("2")])
    head = await store.head(key)
    assert await store.save_checkpoint(
        key, checkpoint(head.last_seq, head.epoch), expected_version=0
    )
    await store.replace(key, [msg("new")])
    assert await store.load_checkpoint(key) is None
    new_head = await store.head(key)
    assert new_head.epoch != head.epoch
    assert new_head.checkpoint_version == 0
    await store.delete(key)
    await store.save(key, msg("again"))
    assert await store.load_checkpoint(key) is None


@pytest.mark.anyio
async def test_leases(store: RedisChatStorage, url_and_cluster: tuple[str, bool]) -> None:
    key = ChatKey("u", "s", "a")
    assert await store.acquire_lease(key, "A", 30)
    assert not await store.acquire_lease(key, "B", 30)
    assert await store.acquire_lease(key, "A", 60)  # re-acquiring extends it
    lease_key = store.layout.key(key).lease
    pttl = await store._client.pttl(lease_key)
    assert 30_000 < pttl <= 60_000
    await store.release_lease(key, "B")  # not B's: a no-op
    assert not await store.acquire_lease(key, "B", 30)
    await store.release_lease(key, "A")
    assert await store.acquire_lease(key, "B", 30)
    # A holder that dies loses the lease when it expires (the server's clock): make it
    # expire now instead of waiting.
    await store._client.pexpireat(lease_key, 1)
    assert await store.acquire_lease(key, "C", 30)
    with pytest.raises(InvalidArgumentError):
        await store.acquire_lease(key, "", 30)
    with pytest.raises(InvalidArgumentError):
        await store.acquire_lease(key, "A", 0)
    await store.delete(key)
    assert await store._client.exists(lease_key) == 0


# --------------------------------------------------------------------------- replace


@pytest.mark.anyio
async def test_replace_and_conditional_save(store: RedisChatStorage) -> None:
    key = ChatKey("u", "s", "a")
    await store.save_messages(key, [msg("1", 1), msg("2", 2)])
    record = await store.save_record(key, ConversationRecord("status", {"done": False}))
    before = await store.head(key)
    with pytest.raises(InvalidMessageError):
        await store.replace(key, [msg("x"), ChatMessage("tool", "orphan", tool_call_id="x")])
    assert await store.head(key) == before
    stored = await store.replace(key, [msg("a", 5), msg("b", 6, role="assistant")])
    assert [m.text for m in stored] == ["a", "b"]
    assert await store.fetch(key) == stored
    after = await store.head(key)
    assert after.epoch != before.epoch
    assert after.last_seq > before.last_seq  # never reused
    assert await store.fetch_records(key) == [record]  # records are not messages
    # Conditional saves.
    with pytest.raises(ConflictError):
        await store.save_messages_if(key, [msg("stale")], expected_version=before.version)
    with pytest.raises(ConflictError):
        await store.save_messages_if(key, [msg("stale")], expected_version="")
    assert [m.text for m in await store.fetch(key)] == ["a", "b"]
    got = await store.save_messages_if(key, [msg("c", 7)], expected_version=after.version)
    assert [m.text for m in got] == ["c"]
    assert (
        await store.save_messages_if(key, [], expected_version=(await store.head(key)).version)
        == []
    )
    with pytest.raises(ConflictError):
        await store.save_messages_if(key, [], expected_version=after.version)
    empty = ChatKey("u", "s", "new")
    assert await store.save_messages_if(empty, [msg("first")], expected_version=".0")
    # Replacing with nothing empties the key.
    assert await store.replace(key, []) == []
    assert await store.head(key) == Head(0, "", 0)
    assert await store.fetch(key) == []


# --------------------------------------------------------------------------- sessions


async def _fill_sessions(stores: list[Any], user: str) -> None:
    # Times chosen so that some sessions tie, some are 1 µs apart (the cursor's float
    # arithmetic rounds those), and one session's newest message is not its last saved.
    times = [T0 + timedelta(microseconds=n) for n in (0, 1, 1, 2, 7, 7, 7)]
    for s in stores:
        for n, at in enumerate(times):
            session = f"s{n % 5}/{'*' * (n % 2)}"
            await s.save_messages(
                ChatKey(user, session, f"agent{n % 2}"),
                [ChatMessage("user", f"q{n}", id=f"q{n}", created_at=at + timedelta(days=n))],
            )
        late = T0 - timedelta(days=1)
        await s.save(
            ChatKey(user, "s0/", "agent9"), ChatMessage("user", "old", id="old", created_at=late)
        )
        await s.save_record(ChatKey(user, "records-only", "a"), ConversationRecord("status"))
        await s.save(ChatKey("someone else", "s0/", "a"), ChatMessage("user", "no", created_at=T0))


async def _pages(s: Any, user: str, limit: int) -> list[list[Any]]:
    pages = []
    cursor = None
    while True:
        page = await s.list_sessions(user, limit=limit, cursor=cursor)
        pages.append(list(page.sessions))
        cursor = page.next_cursor
        if cursor is None:
            return pages


@pytest.mark.anyio
async def test_list_sessions_pages_like_the_memory_store(store: RedisChatStorage) -> None:
    memory = InMemoryChatStorage()
    await _fill_sessions([store, memory], "u")
    for limit in (1, 2, 3, 50):
        assert await _pages(store, "u", limit) == await _pages(memory, "u", limit)
    (everything,) = await _pages(store, "u", 50)
    assert [s.session_id for s in everything][:2] == ["s1/", "s0/*"]
    first = next(s for s in everything if s.session_id == "s0/")
    assert first.agents == ("agent0", "agent9")
    assert first.message_count == 2
    assert first.first_at == T0 - timedelta(days=1)
    assert "records-only" not in {s.session_id for s in everything}
    # Deleting a conversation keeps the session's last activity (its place in the listing,
    # so a cursor that passed it never meets it again); delete_user empties it all.
    before = [s.session_id for s in everything]
    for s in (store, memory):
        await s.delete(ChatKey("u", "s0/", "agent0"))
    assert await _pages(store, "u", 2) == await _pages(memory, "u", 2)
    (everything,) = await _pages(store, "u", 50)
    assert [s.session_id for s in everything] == before
    kept = next(s for s in everything if s.session_id == "s0/")
    assert (kept.agents, kept.message_count) == (("agent9",), 1)
    assert kept.last_at == first.last_at
    await store.delete_user("u")
    assert (await store.list_sessions("u")).sessions == ()
    assert len((await store.list_sessions("someone else")).sessions) == 1


@pytest.mark.anyio
async def test_list_sessions_many_sessions_same_time(store: RedisChatStorage) -> None:
    memory = InMemoryChatStorage()
    for n in range(150):  # more than one index chunk, every score equal or 1 µs apart
        at = T0 + timedelta(microseconds=n % 2)
        for s in (store, memory):
            await s.save(
                ChatKey("u", f"s{n:03}", "a"), ChatMessage("user", "x", id=f"m{n}", created_at=at)
            )
    for limit in (7, 64):
        pages = await _pages(store, "u", limit)
        assert pages == await _pages(memory, "u", limit)
        ids = [s.session_id for page in pages for s in page]
        assert len(ids) == len(set(ids)) == 150


@pytest.mark.anyio
async def test_list_sessions_arguments(store: RedisChatStorage) -> None:
    with pytest.raises(InvalidArgumentError):
        await store.list_sessions("u", limit=0)
    with pytest.raises(InvalidArgumentError):
        await store.list_sessions("u", cursor="not a cursor")
    page = await store.list_sessions("u", cursor=encode_session_cursor(T0, "x"))
    assert page.sessions == ()
    assert page.next_cursor is None


@pytest.mark.anyio
async def test_session_index_reads_no_message(
    store: RedisChatStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing reads the index and each listed session's heads, never a message list."""
    await store.save_messages(ChatKey("u", "big", "a"), [msg(f"m{n}", n) for n in range(500)])
    await store.save(ChatKey("u", "small", "a"), msg("x", 1000))
    await store.list_sessions("u", limit=1)  # scripts loaded, Cluster nodes known
    calls = Calls(store, monkeypatch)
    ran: list[str] = []
    eval_many = store._redis.eval_many

    async def spied(script: Any, batch: Any) -> Any:
        ran.extend([script.name] * len(batch))
        return await eval_many(script, batch)

    monkeypatch.setattr(store._redis, "eval_many", spied)
    page = await store.list_sessions("u", limit=1)
    assert [s.session_id for s in page.sessions] == ["small"]
    assert "ZREVRANGEBYSCORE" in calls.names
    assert "LRANGE" not in calls.names
    # The heads of the page's sessions and of the one after it (is there a next page?).
    assert ran == ["session_info", "session_info"]
    fetching = {scripts.FETCH.sha, scripts.FETCH_SESSION.sha, scripts.FETCH_SINCE.sha}
    assert not {a[1] for a in calls.args if a[0] == "EVALSHA"} & fetching


# --------------------------------------------------------------------------- search


@pytest.mark.anyio
async def test_search_within_one_user(store: RedisChatStorage) -> None:
    memory = InMemoryChatStorage()
    data = [
        (ChatKey("u", "s1", "a"), msg("the invoice for March is overdue", 1)),
        (ChatKey("u", "s1", "a"), msg("please pay the invoice", 2, role="assistant")),
        (ChatKey("u", "s2", "b"), msg("Café opening hours", 3)),
        (
            ChatKey("u", "s2", "b"),
            ChatMessage(
                "assistant",
                None,
                tool_calls=(ToolCall("c1", "lookup_invoice", '{"n": 1}'),),
                created_at=T0,
            ),
        ),
        (ChatKey("other", "s1", "a"), msg("invoice of another user", 4)),
    ]
    for s in (store, memory):
        for key, message in data:
            await s.save(key, message)
    for query in ("invoice", "cafe", "overdue invoice", "lookup_invoice"):
        got = await store.search("u", query)
        want = await memory.search("u", query)
        assert [(h.key, h.message.id, h.snippet) for h in got] == [
            (h.key, h.message.id, h.snippet) for h in want
        ]
        assert all(h.key.user_id == "u" for h in got)
    assert len(await store.search("u", "invoice", limit=1)) == 1
    assert await store.search("nobody", "invoice") == []
    with pytest.raises(InvalidArgumentError):
        await store.search("u", "  ")
    with pytest.raises(InvalidArgumentError):
        await store.search("u", "invoice", limit=0)


# --------------------------------------------------------------------------- records


@pytest.mark.anyio
async def test_records_in_order_with_messages_never_fetched(
    store: RedisChatStorage, url_and_cluster: tuple[str, bool]
) -> None:
    key = ChatKey("u", "s", "a")
    await store.save(
        key, ChatMessage("assistant", None, tool_calls=(ToolCall("call-1", "rm", "{}"),))
    )
    approval = ConversationRecord(
        "tool_approval", {"tool_call_id": "call-1", "decision": "approved"}
    )
    stored = await store.save_record(key, approval)
    assert stored.seq > (await store.head(key)).last_seq
    assert stored.created_at is not None
    await store.save(key, ChatMessage("tool", "done", tool_call_id="call-1"))
    ui = await store.save_record(key, ConversationRecord("ui", {"tab": 2}, created_at=T0))
    tail = await store.fetch_since(key, 0)
    assert tail.seqs[0] < stored.seq < tail.seqs[1] < ui.seq  # comparable sequence numbers
    assert await store.save_record(key, approval) == stored  # idempotent by id
    assert await store.fetch_records(key) == [stored, ui]
    assert await store.fetch_records(key, kind="ui") == [ui]
    assert ui.created_at == T0
    assert len(await store.fetch(key)) == 2  # never in fetch
    assert len(await store.fetch_all_chats("u", "s")) == 2
    # Found by a new instance (a restarted worker): the pending call resumes.
    url, cluster = url_and_cluster
    async with RedisChatStorage(url, prefix=store.prefix, cluster=cluster) as again:
        (found,) = await again.fetch_records(key, kind="tool_approval")
        assert found.data["decision"] == "approved"
        assert found == stored
    with pytest.raises(InvalidArgumentError):
        await store.save_record(key, ConversationRecord("", {}))
    with pytest.raises(InvalidArgumentError):
        await store.save_record(key, ConversationRecord("k", {"x": object()}))
    # A key holding only records is no listed key, yet delete_user erases it.
    lone = ChatKey("u", "s2", "z")
    await store.save_record(lone, ConversationRecord("status", {"ok": True}))
    assert lone not in await store.list_keys("u")
    await store.delete(key)
    assert await store.fetch_records(key) == []
    await store.delete_user("u")
    assert await store.fetch_records(lone) == []


# --------------------------------------------------------------------------- retention


@pytest.mark.anyio
async def test_purge_is_zero_the_ttl_does_the_work(store: RedisChatStorage) -> None:
    key = ChatKey("u", "s", "a")
    await store.save(key, msg("very old", -(10**6)))
    assert await store.purge() == 0
    assert await store.purge(now=datetime(2100, 1, 1, tzinfo=UTC)) == 0
    assert len(await store.fetch(key)) == 1
    with pytest.raises(InvalidArgumentError):
        await store.purge(now=datetime(2100, 1, 1))  # naive


@pytest.mark.anyio
async def test_ttl_covers_every_key_of_a_session(url_and_cluster: tuple[str, bool]) -> None:
    url, cluster = url_and_cluster
    async with RedisChatStorage(
        url, prefix=f"ttl-{uuid.uuid4().hex[:8]}", cluster=cluster, ttl="1h"
    ) as s:
        key = ChatKey("u", "s", "a")
        await s.save_messages(key, [msg("1"), msg("2")])
        head = await s.head(key)
        await s.save_checkpoint(key, checkpoint(head.last_seq, head.epoch), expected_version=0)
        await s.save_record(key, ConversationRecord("status"))
        names = s.layout.key(key)
        x, y = s.layout.index("u")
        for name in (
            names.messages,
            names.ids,
            names.head,
            names.checkpoint,
            names.records,
            names.agents,
            names.session,
            x,
            y,
        ):
            assert 0 < await s._client.pttl(name) <= 3_600_000, name


@pytest.mark.anyio
async def test_lease_expires_on_an_injected_clock(url_and_cluster: tuple[str, bool]) -> None:
    url, cluster = url_and_cluster
    now = [1_714_521_600.0]
    prefix = f"clock-{uuid.uuid4().hex[:8]}"
    async with RedisChatStorage(url, prefix=prefix, cluster=cluster, clock=lambda: now[0]) as s:
        key = ChatKey("u", "s", "a")
        assert await s.acquire_lease(key, "A", 10)
        now[0] += 9
        assert not await s.acquire_lease(key, "B", 10)
        now[0] += 2
        assert await s.acquire_lease(key, "B", 10)
        assert not await s.acquire_lease(key, "A", 10)
        await s.release_lease(key, "A")
        assert not await s.acquire_lease(key, "A", 10)
        await s.release_lease(key, "B")
        assert await s.acquire_lease(key, "A", 10)


def test_unknown_keyword_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="retention"):
        RedisChatStorage("redis://127.0.0.1:1/0", retention=60)
    assert RedisChatStorage("redis://127.0.0.1:1/0", socket_timeout=2).cluster is False


@pytest.mark.anyio
async def test_a_rewind_racing_another_instances_saves_hides_them_and_never_fails(
    store: RedisChatStorage, url_and_cluster: tuple[str, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another worker saves a turn after every read the rewind makes: under a lock (SQLite,
    # PostgreSQL, JSONL) those turns come before the rewind and are hidden with the rest;
    # here too, at the first attempt, and the rewind record counts them.
    from storage.stores.redis import timetravel

    url, cluster = url_and_cluster
    key = ChatKey("u", "racing", "a")
    await store.save_messages(key, [msg("q0", 0, id="q0"), msg("a0", 1, "assistant", id="a0")])
    await store.save_messages(key, [msg("q1", 2, id="q1"), msg("a1", 3, "assistant", id="a1")])
    reads = 0
    read = timetravel.timeline  # type: ignore[attr-defined]  # patched where rewind reads it
    async with RedisChatStorage(url, prefix=store.prefix, cluster=cluster) as other:

        async def read_then_save(ctx: Any, k: ChatKey) -> Any:
            nonlocal reads
            found = await read(ctx, k)
            reads += 1
            await other.save_messages(
                k, [msg(f"late{reads}", 10, id=f"lq{reads}"), msg("ok", 11, "assistant")]
            )
            return found

        monkeypatch.setattr(timetravel, "timeline", read_then_save)
        assert await store.rewind(key, "a0") == 4  # q1, a1 and the turn saved after the read
        monkeypatch.undo()
        assert reads == 1
        assert [m.id for m in await other.fetch(key)] == ["q0", "a0"]
        (rewind,) = (await store.fetch_timeline(key)).rewinds
        assert (rewind.to_id, rewind.hidden) == ("a0", 4)
        assert rewind.through_seq == (await store.fetch_timeline(key)).seqs[-1]
        await other.save(key, msg("after", 20, id="after"))
        assert [m.id for m in await store.fetch(key)] == ["q0", "a0", "after"]
