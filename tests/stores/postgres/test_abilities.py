"""The optional abilities (storage.abilities) of PostgresChatStorage, on a real server.

Sequenced heads and tails, checkpoints (compare-and-set) and leases, replace and conditional
saves, session listing, full-text search, records and retention; each against the
semantics of the in-memory reference where one applies, and with EXPLAIN where the ability
promises an index. Run as a module this file is a child process::

    python -m tests.stores.postgres.test_abilities lease|record DSN SCHEMA [CLOCK]
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import anyio
import anyio.lowlevel
import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.abilities import (
    ABILITIES,
    ConversationRecord,
    Head,
    SummaryCheckpoint,
    decode_session_cursor,
    encode_session_cursor,
)
from storage.codec import encode
from storage.errors import ConflictError, InvalidArgumentError, InvalidMessageError
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from storage.stores.postgres import PostgresChatStorage
from storage.testing.harness import FakeClock
from tests.paths import REPO

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.postgres

KEY = ChatKey("ana", "trip", "agent")
SUMMARY = {"chatlayers": {"summary": True}}
T0 = datetime(2024, 5, 1, tzinfo=UTC)
ROOT = REPO


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg


@pytest.fixture
def schema() -> str:
    return f"ab_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def store(postgres_dsn: str, schema: str) -> AsyncIterator[PostgresChatStorage]:
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        yield s


@pytest.fixture
async def conn(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(postgres_dsn)
    yield c
    await c.close()


def summary(text: str = "summary") -> ChatMessage:
    return ChatMessage("system", text, metadata=SUMMARY)


def checkpoint(head: Head, covers_to: int | None = None) -> SummaryCheckpoint:
    return SummaryCheckpoint(
        (summary(),),
        covers_to or head.last_seq,
        head.epoch,
        "manual",
        datetime.now(UTC),
    )


async def explain(conn: asyncpg.Connection, sql: str, *args: object) -> str:
    """The plan of ``sql`` with ``args``, one string (a prepared statement, as the store's)."""
    await conn.execute("DEALLOCATE ALL")
    types = ", ".join(
        "bigint" if isinstance(a, int) else "timestamptz" if isinstance(a, datetime) else "text"
        for a in args
    )
    await conn.execute(f"PREPARE q ({types}) AS {sql}")
    literals = ", ".join(
        str(a) if isinstance(a, int) else "'" + str(a).replace("'", "''") + "'" for a in args
    )
    rows = await conn.fetch(f"EXPLAIN EXECUTE q({literals})")
    return "\n".join(r[0] for r in rows)


def test_every_ability_is_implemented() -> None:
    s = PostgresChatStorage("postgresql://h/db")
    assert [a.__name__ for a in ABILITIES if not isinstance(s, a)] == []


# --------------------------------------------------------------------------- sequenced


@pytest.mark.anyio
async def test_head_and_fetch_since(store: PostgresChatStorage) -> None:
    assert await store.head(KEY) == Head(0, "", 0)
    empty = await store.fetch_since(KEY, 0)
    assert (empty.head, empty.seqs, empty.messages) == (Head(0, "", 0), (), ())
    first = await store.save_messages(KEY, [ChatMessage("user", f"m{n}") for n in range(3)])
    head = await store.head(KEY)
    assert head.last_seq == 3
    assert head.epoch
    assert head.version == f"{head.epoch}.3"
    tail = await store.fetch_since(KEY, 1)
    assert tail.head == head
    assert tail.seqs == (2, 3)
    assert list(tail.messages) == first[1:]
    assert (await store.fetch_since(KEY, 3)).messages == ()
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(InvalidArgumentError):
            await store.fetch_since(KEY, bad)  # type: ignore[arg-type]
    # A record takes a number but is not a message: the head does not move.
    await store.save_record(KEY, ConversationRecord("status", {"s": 1}))
    assert await store.head(KEY) == head
    await store.delete(KEY)
    assert await store.head(KEY) == Head(0, "", 0)
    await store.save(KEY, ChatMessage("user", "again"))
    assert (await store.head(KEY)).epoch not in ("", head.epoch)


@pytest.mark.anyio
async def test_head_and_tail_are_indexed_reads(
    store: PostgresChatStorage, conn: asyncpg.Connection
) -> None:
    for n in range(60):
        batch = [ChatMessage("user", f"m{i}") for i in range(20)]
        await store.save_messages(ChatKey("ana", f"s{n}", "agent"), batch)
    await conn.execute(f'ANALYZE "{store.schema}".chatlayers_messages')
    head_plan = await explain(conn, store._sql.head, "ana", "s7", "agent")
    assert "Index Only Scan Backward using chatlayers_messages_by_key" in head_plan
    assert "Seq Scan on chatlayers_messages " not in head_plan
    tail_plan = await explain(conn, store._sql.fetch_since, "ana", "s7", "agent", 10)
    assert "Index Scan using chatlayers_messages_by_key" in tail_plan
    assert "Seq Scan on chatlayers_messages " not in tail_plan


# --------------------------------------------------------------------------- checkpoints


@pytest.mark.anyio
async def test_checkpoint_compare_and_set(store: PostgresChatStorage) -> None:
    saved = await store.save_messages(KEY, [ChatMessage("user", f"m{n}") for n in range(4)])
    head = await store.head(KEY)
    assert await store.load_checkpoint(KEY) is None
    one = await store.save_checkpoint(KEY, checkpoint(head, 3), expected_version=0)
    assert one is not None
    assert one.version == 1
    assert one.covers_to == 3
    assert await store.load_checkpoint(KEY) == one
    assert await store.save_checkpoint(KEY, checkpoint(head), expected_version=0) is None
    two = await store.save_checkpoint(KEY, checkpoint(head), expected_version=1)
    assert two is not None
    assert two.version == 2
    assert (await store.head(KEY)).checkpoint_version == 2
    # Another epoch, or a position the record does not hold: nothing written.
    stale = SummaryCheckpoint(
        (summary(),),
        4,
        "other-epoch",
        "manual",
        datetime.now(UTC),
    )
    assert await store.save_checkpoint(KEY, stale, expected_version=2) is None
    assert await store.save_checkpoint(KEY, checkpoint(head, 99), expected_version=2) is None
    record = await store.save_record(KEY, ConversationRecord("status", {}))
    assert (
        await store.save_checkpoint(KEY, checkpoint(head, record.seq), expected_version=2) is None
    )
    assert await store.load_checkpoint(KEY) == two
    # Stored apart from the messages.
    assert await store.fetch(KEY) == saved
    assert [c.message for c in await store.fetch_all_chats("ana", "trip")] == saved
    bad = SummaryCheckpoint(
        (ChatMessage("system", "x"),),
        4,
        head.epoch,
        "m",
        T0,
    )
    with pytest.raises(InvalidMessageError, match="summary"):
        await store.save_checkpoint(KEY, bad, expected_version=2)
    with pytest.raises(InvalidArgumentError):
        await store.save_checkpoint(KEY, checkpoint(head), expected_version=-1)


@pytest.mark.anyio
async def test_checkpoint_race_between_two_pools_has_one_winner(
    postgres_dsn: str, schema: str
) -> None:
    async with (
        PostgresChatStorage(postgres_dsn, schema=schema) as a,
        PostgresChatStorage(postgres_dsn, schema=schema) as b,
    ):
        await a.save_messages(KEY, [ChatMessage("user", f"m{n}") for n in range(5)])
        head = await a.head(KEY)
        results: list[SummaryCheckpoint | None] = []

        async def attempt(store: PostgresChatStorage) -> None:
            results.append(await store.save_checkpoint(KEY, checkpoint(head), expected_version=0))

        async with anyio.create_task_group() as tg:
            for n in range(12):
                tg.start_soon(attempt, (a, b)[n % 2])
        assert sum(r is not None for r in results) == 1
        assert (await b.head(KEY)).checkpoint_version == 1


# --------------------------------------------------------------------------- leases


@pytest.mark.anyio
async def test_leases_with_an_injected_clock(postgres_dsn: str, schema: str) -> None:
    clock = FakeClock()
    async with (
        PostgresChatStorage(postgres_dsn, schema=schema, clock=clock) as a,
        PostgresChatStorage(postgres_dsn, schema=schema, clock=clock) as b,
    ):
        assert await a.acquire_lease(KEY, "a", 30)
        assert not await b.acquire_lease(KEY, "b", 30)
        clock.advance(20)
        assert await a.acquire_lease(KEY, "a", 30)  # extends to +50
        clock.advance(20)
        assert not await b.acquire_lease(KEY, "b", 30)
        await b.release_lease(KEY, "b")  # not the holder: a no-op
        assert not await b.acquire_lease(KEY, "b", 30)
        clock.advance(11)
        assert await b.acquire_lease(KEY, "b", 30)  # a's lease expired
        await b.release_lease(KEY, "b")
        assert await a.acquire_lease(KEY, "a\x00x", 1)  # NUL in an owner is fine
        for bad_owner, bad_ttl in (("", 1), ("a", 0), ("a", float("inf")), ("a", True)):
            with pytest.raises(InvalidArgumentError):
                await a.acquire_lease(KEY, bad_owner, bad_ttl)


@pytest.mark.anyio
async def test_leases_on_the_server_clock(store: PostgresChatStorage) -> None:
    assert await store.acquire_lease(KEY, "one", 60)
    assert not await store.acquire_lease(KEY, "two", 60)
    await store.release_lease(KEY, "one")
    assert await store.acquire_lease(KEY, "two", 60)


async def _child_lease(dsn: str, schema: str, now: float) -> None:
    async with PostgresChatStorage(dsn, schema=schema, clock=lambda: now) as s:
        assert await s.acquire_lease(KEY, "doomed-worker", 30)
        print("held", flush=True)
        await anyio.sleep_forever()  # until killed


@pytest.mark.anyio
async def test_lease_of_a_killed_worker_is_lost_after_its_ttl(
    postgres_dsn: str, schema: str
) -> None:
    clock = FakeClock()
    args = [sys.executable, "-m", "tests.stores.postgres.test_abilities", "lease"]
    async with await anyio.open_process([*args, postgres_dsn, schema, str(clock.now)]) as child:
        assert child.stdout is not None
        with anyio.fail_after(60):
            line = await child.stdout.receive()
        assert line.strip() == b"held"
        child.kill()  # SIGKILL: the lease is never released
        await child.wait()
    async with PostgresChatStorage(postgres_dsn, schema=schema, clock=clock) as s:
        clock.advance(29)
        assert not await s.acquire_lease(KEY, "survivor", 30)
        clock.advance(2)
        assert await s.acquire_lease(KEY, "survivor", 30)


# --------------------------------------------------------------------------- replace


@pytest.mark.anyio
async def test_replace_starts_a_new_epoch_and_drops_the_checkpoint(
    store: PostgresChatStorage,
) -> None:
    await store.save_messages(KEY, [ChatMessage("user", f"m{n}") for n in range(4)])
    record = await store.save_record(KEY, ConversationRecord("approval", {"ok": True}))
    head = await store.head(KEY)
    assert await store.save_checkpoint(KEY, checkpoint(head), expected_version=0)
    new = [ChatMessage("system", "be brief", created_at=T0), ChatMessage("user", "only this")]
    stored = await store.replace(KEY, new)
    assert [m.id for m in stored] == [m.id for m in new]
    assert stored[0] == new[0]
    new = stored
    after = await store.head(KEY)
    assert after.epoch != head.epoch
    assert after.checkpoint_version == 0
    assert after.last_seq > record.seq  # numbers keep growing: records stay ordered
    assert await store.fetch(KEY) == new
    assert await store.load_checkpoint(KEY) is None
    assert await store.fetch_records(KEY) == [record]
    info = (await store.list_sessions("ana")).sessions[0]
    assert info.message_count == 2
    assert [h.message.text for h in await store.search("ana", "m0 only")] == ["only this"]
    assert await store.replace(KEY, []) == []
    assert await store.head(KEY) == Head(0, "", 0)
    assert (await store.list_sessions("ana")).sessions == ()


@pytest.mark.anyio
async def test_invalid_replace_changes_nothing(store: PostgresChatStorage) -> None:
    saved = await store.save_messages(KEY, [ChatMessage("user", "keep me")])
    head = await store.head(KEY)
    for bad in (
        # (a system message mid-record is accepted, as save accepts it: system="anywhere")
        [ChatMessage("user", "x"), ChatMessage("tool", "late orphan", tool_call_id="x")],
        [ChatMessage("tool", "orphan", tool_call_id="nope")],
        [ChatMessage("robot", "x")],
    ):
        with pytest.raises(InvalidMessageError):
            await store.replace(KEY, bad)
    assert await store.fetch(KEY) == saved
    assert await store.head(KEY) == head


@pytest.mark.anyio
async def test_save_messages_if_detects_a_stale_writer(postgres_dsn: str, schema: str) -> None:
    async with (
        PostgresChatStorage(postgres_dsn, schema=schema) as a,
        PostgresChatStorage(postgres_dsn, schema=schema) as b,
    ):
        assert (await a.head(KEY)).version == ".0"
        first = await a.save_messages_if(KEY, [ChatMessage("user", "1")], expected_version=".0")
        version = (await a.head(KEY)).version
        results: list[str] = []

        async def attempt(store: PostgresChatStorage, n: int) -> None:
            try:
                await store.save_messages_if(
                    KEY,
                    [ChatMessage("user", f"w{n}"), ChatMessage("assistant", f"r{n}")],
                    expected_version=version,
                )
                results.append("won")
            except ConflictError:
                results.append("conflict")

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(attempt, (a, b)[n % 2], n)
        assert sorted(results) == ["conflict"] * 7 + ["won"]
        assert len(await b.fetch(KEY)) == 1 + 2  # the losers stored nothing
        assert (await a.fetch(KEY))[0] == first[0]
        with pytest.raises(ConflictError):
            await a.save_messages_if(KEY, [], expected_version=version)
        current = (await a.head(KEY)).version
        assert await a.save_messages_if(KEY, [], expected_version=current) == []
        with pytest.raises(ConflictError):
            await a.save_messages_if(KEY, [ChatMessage("user", "x")], expected_version="a\x00b")


# --------------------------------------------------------------------------- sessions


async def _sessions_of(store: object, user: str, limit: int) -> list[tuple[object, ...]]:
    """Every page of ``list_sessions``, flattened."""
    out: list[tuple[object, ...]] = []
    cursor = None
    while True:
        page = await store.list_sessions(user, limit=limit, cursor=cursor)  # type: ignore[attr-defined]
        assert len(page.sessions) <= limit
        out += [
            (i.session_id, i.agents, i.message_count, i.first_at, i.last_at) for i in page.sessions
        ]
        cursor = page.next_cursor
        if cursor is None:
            return out


@pytest.mark.anyio
async def test_list_sessions_pages_match_the_reference(store: PostgresChatStorage) -> None:
    reference = InMemoryChatStorage()
    for n in range(23):
        # Ties in last_at (n // 3), several agents, sessions written out of order.
        session = f"s{(n * 7) % 23:02d}"
        at = T0 + timedelta(minutes=n // 3)
        for agent in ("a", "b")[: 1 + n % 2]:
            batch = [
                ChatMessage("user", "hi", created_at=at - timedelta(hours=1)),
                ChatMessage("assistant", "yo", created_at=at),
            ]
            await store.save_messages(ChatKey("ana", session, agent), batch)
            await reference.save_messages(ChatKey("ana", session, agent), batch)
    await store.save(ChatKey("bo", "other", "a"), ChatMessage("user", "not ana's"))
    for limit in (1, 4, 50):
        assert await _sessions_of(store, "ana", limit) == await _sessions_of(
            reference, "ana", limit
        )
    assert len(await _sessions_of(store, "ana", 4)) == 23
    await store.delete(ChatKey("ana", "s00", "b"))
    await reference.delete(ChatKey("ana", "s00", "b"))
    assert await _sessions_of(store, "ana", 5) == await _sessions_of(reference, "ana", 5)
    for bad_limit in (0, -1, True):
        with pytest.raises(InvalidArgumentError):
            await store.list_sessions("ana", limit=bad_limit)
    with pytest.raises(InvalidArgumentError):
        await store.list_sessions("ana", cursor="not a cursor")
    # A cursor past everything: an empty last page.
    end = encode_session_cursor(T0 - timedelta(days=1), "zz")
    assert decode_session_cursor(end)[1] == "zz"
    assert (await store.list_sessions("ana", cursor=end)).sessions == ()


@pytest.mark.anyio
async def test_list_sessions_reads_the_summary_index_not_messages(
    store: PostgresChatStorage, conn: asyncpg.Connection
) -> None:
    await store.save(KEY, ChatMessage("user", "hi"))
    sessions = f'"{store.schema}".chatlayers_messages_sessions'
    await conn.execute(
        f"INSERT INTO {sessions} (user_id, session_id, agents, message_count, first_at, last_at) "
        "SELECT 'u' || (n % 200), 's' || n, ARRAY['a'], 10, now(), now() - n * interval '1s' "
        "FROM generate_series(1, 20000) AS n"
    )
    await conn.execute(f"ANALYZE {sessions}")
    first = await explain(conn, store._sql.list_sessions, "u7", 51)
    later = await explain(conn, store._sql.list_sessions_after, "u7", 51, T0, "s9")
    for plan in (first, later):
        assert "Index Scan using chatlayers_messages_sessions_last" in plan
        assert "chatlayers_messages " not in plan.replace("chatlayers_messages_", "")
    assert "Index Cond: ((user_id = 'u7'::text) AND (last_at <=" in later


@pytest.mark.anyio
async def test_list_sessions_summary_follows_writes_and_deletes(
    store: PostgresChatStorage,
) -> None:
    early, late = T0, T0 + timedelta(hours=2)
    await store.save(ChatKey("ana", "s", "b"), ChatMessage("user", "x", created_at=late))
    await store.save(ChatKey("ana", "s", "a"), ChatMessage("user", "y", created_at=early))
    info = (await store.list_sessions("ana")).sessions[0]
    assert (info.agents, info.message_count, info.first_at, info.last_at) == (
        ("a", "b"),
        2,
        early,
        late,
    )
    await store.delete(ChatKey("ana", "s", "b"))
    info = (await store.list_sessions("ana")).sessions[0]
    assert (info.agents, info.message_count, info.first_at, info.last_at) == (
        ("a",),
        1,
        early,
        late,  # the session's last activity stays: a listing cursor never meets it again
    )
    await store.delete_user("ana")
    assert (await store.list_sessions("ana")).sessions == ()


# --------------------------------------------------------------------------- search


@pytest.mark.anyio
async def test_search_is_user_scoped_ranked_and_accent_insensitive(
    store: PostgresChatStorage,
) -> None:
    await store.save_messages(
        KEY,
        [
            ChatMessage("user", "I want a refund for my flight"),
            ChatMessage("assistant", "The refund for the flight to Paris is approved, refund id 7"),
            ChatMessage("user", "Merci, le Café était bon"),
            ChatMessage("assistant", None, (ToolCall("c1", "issue_refund", '{"city": "Zürich"}'),)),
        ],
    )
    await store.save(ChatKey("bo", "trip", "agent"), ChatMessage("user", "refund refund flight"))
    hits = await store.search("ana", "refund flight")
    assert [h.message.text[:22] for h in hits[:2]] == [
        "The refund for the fli",
        "I want a refund for my",
    ]
    assert all(h.key.user_id == "ana" for h in hits)
    assert hits[0].score >= hits[1].score > 0
    assert "refund" in hits[0].snippet
    assert [h.message.text for h in await store.search("ana", "CAFE")] == [
        "Merci, le Café était bon"
    ]
    assert [h.message.tool_calls[0].name for h in await store.search("ana", "zurich")] == [
        "issue_refund"
    ]
    assert await store.search("ana", "absent") == []
    assert len(await store.search("ana", "refund", limit=1)) == 1
    for bad_query, bad_limit in (("", 5), ("  ?! ", 5), ("refund", 0)):
        with pytest.raises(InvalidArgumentError):
            await store.search("ana", bad_query, limit=bad_limit)


@pytest.mark.anyio
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=st.text(max_size=30))
async def test_search_input_never_raises_a_server_error(postgres_dsn: str, query: str) -> None:
    async with PostgresChatStorage(postgres_dsn, schema="search_fuzz") as s:
        await s.save(KEY, ChatMessage("user", 'or and not " - ( ) : * & | ! <-> refund'))
        try:
            hits = await s.search("ana", query)
        except InvalidArgumentError:
            return  # a query holding no word
        assert all(h.key.user_id == "ana" for h in hits)


@pytest.mark.anyio
async def test_search_reads_the_gin_index(
    store: PostgresChatStorage, conn: asyncpg.Connection
) -> None:
    await store.open()
    await conn.execute(  # 20,000 rows of filler for user0 (the store's columns, in SQL)
        f'INSERT INTO "{store.schema}".chatlayers_messages (user_id, session_id, agent_id, '
        "key_seq, message_id, created_at, record, search) "
        "SELECT 'user0', 'filler' || n, 'a', 1, 'id', now(), '{}', "
        "to_tsvector('simple', 'common words number ' || n) FROM generate_series(1, 20000) n"
    )
    # A user with many messages and a rare word: the GIN index finds it, not a scan of the
    # user's rows (for a user with few rows the planner rightly reads those instead).
    await store.save(ChatKey("user0", "s0", "a"), ChatMessage("user", "a rare xylophone"))
    await conn.execute(f'VACUUM ANALYZE "{store.schema}".chatlayers_messages')
    plan = await explain(conn, store._sql.search, "user0", '"xylophone"', 20)
    assert "Bitmap Index Scan on chatlayers_messages_fts" in plan
    hits = await store.search("user0", "xylophone")
    assert [h.message.text for h in hits] == ["a rare xylophone"]


# --------------------------------------------------------------------------- records


@pytest.mark.anyio
async def test_records_interleave_with_messages_and_never_reach_fetch(
    store: PostgresChatStorage,
) -> None:
    m1 = await store.save(KEY, ChatMessage("user", "run the tool"))
    approval = ConversationRecord(
        "tool_approval", {"tool_call_id": "c1", "decision": "approved"}, id="r\x001"
    )
    stored = await store.save_record(KEY, approval)
    m2 = await store.save(KEY, ChatMessage("assistant", "done"))
    ui = await store.save_record(KEY, ConversationRecord("ui\x00state", {"tab": [1, 2]}))
    tail = await store.fetch_since(KEY, 0)
    assert tail.seqs[0] < stored.seq < tail.seqs[1] < ui.seq
    assert stored.created_at is not None
    assert stored.id == "r\x001"
    assert await store.fetch(KEY) == m1 + m2
    assert len(await store.fetch_all_chats("ana", "trip")) == 2
    assert await store.search("ana", "approved") == []
    assert (await store.list_sessions("ana")).sessions[0].message_count == 2
    assert await store.fetch_records(KEY) == [stored, ui]
    assert await store.fetch_records(KEY, kind="ui\x00state") == [ui]
    assert await store.fetch_records(KEY, kind="absent") == []
    # Idempotent by id: the stored record comes back, nothing new.
    again = await store.save_record(KEY, ConversationRecord("other", {}, id="r\x001"))
    assert again == stored
    assert len(await store.fetch_records(KEY)) == 2
    with pytest.raises(InvalidArgumentError):
        await store.save_record(KEY, ConversationRecord("", {}))
    with pytest.raises(InvalidArgumentError):
        await store.save_record(KEY, ConversationRecord("k", {"x": object()}))
    await store.delete(KEY)
    assert await store.fetch_records(KEY) == []


async def _child_record(dsn: str, schema: str) -> None:
    async with PostgresChatStorage(dsn, schema=schema) as s:
        await s.save_messages(
            KEY,
            [
                ChatMessage("user", "delete my account"),
                ChatMessage("assistant", None, (ToolCall("call-9", "delete_account", "{}"),)),
            ],
        )
        record = ConversationRecord(
            "tool_approval", {"tool_call_id": "call-9", "decision": "approved"}
        )
        await s.save_record(KEY, record)


@pytest.mark.anyio
async def test_an_approval_stored_by_one_process_resumes_the_call_in_another(
    postgres_dsn: str, schema: str
) -> None:
    args = [
        sys.executable,
        "-m",
        "tests.stores.postgres.test_abilities",
        "record",
        postgres_dsn,
        schema,
    ]
    done = await anyio.run_process(args, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    async with PostgresChatStorage(postgres_dsn, schema=schema) as s:
        history = await s.fetch(KEY)
        answered = {m.tool_call_id for m in history if m.role == "tool"}
        pending = [c for m in history for c in m.tool_calls if c.id not in answered]
        decisions = {
            r.data["tool_call_id"]: r.data["decision"]
            for r in await s.fetch_records(KEY, kind="tool_approval")
        }
        assert [c.id for c in pending] == ["call-9"]
        assert decisions == {"call-9": "approved"}
        for call in pending:
            if decisions.get(call.id) == "approved":
                await s.save(KEY, ChatMessage("tool", "account deleted", tool_call_id=call.id))
        assert [m.role for m in await s.fetch(KEY)] == ["user", "assistant", "tool"]


# --------------------------------------------------------------------------- retention


@pytest.mark.anyio
async def test_purge_deletes_old_messages_their_checkpoints_and_changes_epochs(
    postgres_dsn: str, schema: str
) -> None:
    clock = FakeClock()
    now = datetime.fromtimestamp(clock.now, UTC)
    old, new = now - timedelta(minutes=5), now - timedelta(seconds=10)
    async with PostgresChatStorage(
        postgres_dsn, schema=schema, retention="1m", clock=clock, purge_interval="1d"
    ) as s:
        assert s.retention == 60.0
        mixed, stale = KEY, ChatKey("ana", "old", "agent")
        await s.save(ChatKey("warmup", "s", "a"), ChatMessage("user", "first write purges"))
        await s.save_messages(
            mixed,
            [
                ChatMessage("user", "old", created_at=old),
                ChatMessage("user", "new", created_at=new),
            ],
        )
        await s.save(stale, ChatMessage("user", "old too", created_at=old))
        record = await s.save_record(stale, ConversationRecord("status", {"x": 1}))
        head = await s.head(mixed)
        assert await s.save_checkpoint(mixed, checkpoint(head), expected_version=0)
        # Within the interval, writes do not purge.
        assert [m.text for m in await s.fetch(mixed)] == ["old", "new"]
        assert await s.purge() == 2
        assert [m.text for m in await s.fetch(mixed)] == ["new"]
        after = await s.head(mixed)
        assert after.epoch != head.epoch
        assert after.checkpoint_version == 0
        assert await s.load_checkpoint(mixed) is None
        assert await s.head(stale) == Head(0, "", 0)
        assert await s.fetch_records(stale) == [record]  # records are not messages
        sessions = {i.session_id: i.message_count for i in (await s.list_sessions("ana")).sessions}
        assert sessions == {"trip": 1}
        assert await s.search("ana", "old") == []
        assert await s.purge() == 0
        with pytest.raises(InvalidArgumentError):
            await s.purge(now=datetime(2024, 1, 1))
        assert await s.purge(now=now + timedelta(hours=1)) == 1


@pytest.mark.anyio
async def test_writes_purge_at_most_once_per_interval(postgres_dsn: str, schema: str) -> None:
    clock = FakeClock()

    def at(seconds_ago: float) -> datetime:
        return datetime.fromtimestamp(clock.now - seconds_ago, UTC)

    async with PostgresChatStorage(
        postgres_dsn, schema=schema, retention=300, purge_interval=600, clock=clock
    ) as s:
        await s.save(KEY, ChatMessage("user", "expired at once", created_at=at(400)))
        assert await s.fetch(KEY) == []  # the first write purged, after storing
        clock.advance(10)
        await s.save(KEY, ChatMessage("user", "old but within the interval", created_at=at(400)))
        clock.advance(500)
        await s.save(KEY, ChatMessage("user", "fresh", created_at=at(0)))
        assert len(await s.fetch(KEY)) == 2
        clock.advance(100)
        await s.save(KEY, ChatMessage("user", "fresh too", created_at=at(0)))
        assert [m.text for m in await s.fetch(KEY)] == ["fresh", "fresh too"]


async def _wait_for_a_lock_waiter(conn: asyncpg.Connection) -> None:
    with anyio.fail_after(30):
        while True:
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            if waiting:
                return
            await anyio.lowlevel.checkpoint()


@pytest.mark.anyio
async def test_purge_takes_key_locks_before_session_rows_so_it_cannot_deadlock(
    postgres_dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    """A writer holding the last agent's key lock, then wanting the session's summary row,
    while a purge of 12 agents of the session runs: the purge waits for that key before it
    touches the session row (a loop that refreshed the session per key, fetching keys 10 at
    a time, deadlocked here), so the writer finishes and then the purge does."""
    clock = FakeClock()
    old = datetime.fromtimestamp(clock.now - 3600, UTC)
    keys = [ChatKey("ana", "s", f"a{n:02d}") for n in range(12)]
    second = keys[-1]
    async with PostgresChatStorage(
        postgres_dsn, schema=schema, retention=60, clock=clock, purge_interval=10**6
    ) as s:
        assert await s.purge() == 0  # now the writes below do not purge
        for key in keys:
            await s.save(key, ChatMessage("user", "old", created_at=old))
        late = ChatMessage("user", "new", created_at=datetime.fromtimestamp(clock.now, UTC))
        transaction = conn.transaction()
        await transaction.start()
        await conn.fetchrow(f"SELECT * FROM {s.names.qualified('f_lock')}('ana', 's', 'a11')")
        purged: list[int] = []

        async def purge() -> None:
            purged.append(await s.purge())

        async with anyio.create_task_group() as tg:
            tg.start_soon(purge)
            await _wait_for_a_lock_waiter(conn)  # the purge waits for b's key
            await conn.fetchval(  # now the writer wants the session row: free
                s._sql.save,
                "ana",
                "s",
                "a11",
                [late.id],
                [late.created_at],
                [encode(late)],
                ["new"],
                None,
                False,
            )
            await transaction.commit()
        assert purged == [12]
        assert [m.text for m in await s.fetch(second)] == ["new"]
        assert (await s.list_sessions("ana")).sessions[0].agents == ("a11",)


@pytest.mark.anyio
async def test_purge_without_retention_is_a_no_op(store: PostgresChatStorage) -> None:
    await store.save(KEY, ChatMessage("user", "ancient", created_at=T0 - timedelta(days=9999)))
    assert await store.purge() == 0
    assert len(await store.fetch(KEY)) == 1


if __name__ == "__main__":
    if sys.argv[1] == "lease":
        anyio.run(_child_lease, sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        anyio.run(_child_record, sys.argv[2], sys.argv[3])
