"""PostgresChatStorage against the in-memory reference (storage.stores.memory), ability by
ability: random mixes of saves, conditional saves, replaces, records, checkpoints, deletes,
purges and clock moves applied to both, every observable result compared."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.errors import ConflictError
from storage.message import ChatKey, ChatMessage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.postgres import PostgresChatStorage
from storage.testing.harness import FakeClock

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.postgres

USERS = ("ana", "bo")
SESSIONS = ("s1", "s2", "s3")
AGENTS = ("a", "b")
IDS = [f"id{n}" for n in range(8)]
WORDS = ("refund", "flight", "hotel", "café", "delay")
SUMMARY = {"chatlayers": {"summary": True}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg


def _operations() -> Any:
    keys = st.builds(
        ChatKey, st.sampled_from(USERS), st.sampled_from(SESSIONS), st.sampled_from(AGENTS)
    )
    message = st.tuples(
        st.sampled_from(("user", "assistant")),
        st.sampled_from(WORDS),
        st.sampled_from(IDS),
        st.integers(0, 200),  # seconds before the clock
    )
    batch = st.lists(message, min_size=1, max_size=3)
    return st.lists(
        st.one_of(
            st.tuples(st.just("save"), keys, batch),
            st.tuples(st.just("save_if"), keys, batch, st.booleans()),
            st.tuples(st.just("replace"), keys, st.lists(message, max_size=3)),
            st.tuples(st.just("record"), keys, st.sampled_from(("k1", "k2")), st.sampled_from(IDS)),
            st.tuples(st.just("checkpoint"), keys, st.booleans()),
            st.tuples(st.just("delete"), keys),
            st.tuples(st.just("delete_user"), st.sampled_from(USERS)),
            st.tuples(st.just("advance"), st.integers(1, 120)),
            st.tuples(st.just("purge")),
        ),
        max_size=20,
    )


def _messages(raw: list[tuple[str, str, str, int]], clock: FakeClock) -> list[ChatMessage]:
    now = datetime.fromtimestamp(clock.now, UTC)
    return [
        ChatMessage(role, text, id=mid, created_at=now - timedelta(seconds=ago))
        for role, text, mid, ago in raw
    ]


async def _apply(store: Any, op: tuple[Any, ...], clock: FakeClock, user_suffix: str) -> Any:
    """One operation on one store; its observable result."""
    name = op[0]

    def scoped(key: ChatKey) -> ChatKey:
        return ChatKey(key.user_id + user_suffix, key.session_id, key.agent_id)

    if name == "save":
        return [m.id for m in await store.save_messages(scoped(op[1]), _messages(op[2], clock))]
    if name == "save_if":
        key = scoped(op[1])
        version = (await store.head(key)).version if op[3] else "stale.0"
        try:
            saved = await store.save_messages_if(
                key, _messages(op[2], clock), expected_version=version
            )
        except ConflictError:
            return "conflict"
        return [m.id for m in saved]
    if name == "replace":
        return [m.id for m in await store.replace(scoped(op[1]), _messages(op[2], clock))]
    if name == "record":
        record = await store.save_record(scoped(op[1]), ConversationRecord(op[2], {"n": 1}, op[3]))
        return (record.kind, record.id)
    if name == "checkpoint":
        key = scoped(op[1])
        head = await store.head(key)
        if not head.last_seq:
            return "empty"
        checkpoint = SummaryCheckpoint(
            (ChatMessage("system", "summary", id="sum", metadata=SUMMARY),),
            head.last_seq,
            head.epoch,
            "test",
            datetime.fromtimestamp(clock.now, UTC),
        )
        expected = head.checkpoint_version if op[2] else head.checkpoint_version + 1
        stored = await store.save_checkpoint(key, checkpoint, expected_version=expected)
        return None if stored is None else stored.version
    if name == "delete":
        await store.delete(scoped(op[1]))
        return None
    if name == "delete_user":
        await store.delete_user(op[1] + user_suffix)
        return None
    if name == "purge":
        return await store.purge()
    return None


async def _observe(store: Any, user_suffix: str) -> dict[str, Any]:
    """Everything a caller can see, minus the store's own sequence numbers and epochs."""
    seen: dict[str, Any] = {}
    for user in USERS:
        u = user + user_suffix
        pages = []
        cursor = None
        while True:
            page = await store.list_sessions(u, limit=2, cursor=cursor)
            pages.append(page.sessions)
            cursor = page.next_cursor
            if cursor is None:
                break
        seen[f"sessions {user}"] = pages
        seen[f"keys {user}"] = await store.list_keys(u)
        hits = await store.search(u, " ".join(WORDS), limit=100)
        seen[f"search {user}"] = sorted(
            (h.key.session_id, h.key.agent_id, h.message.id) for h in hits
        )
        for session in SESSIONS:
            seen[f"all {user} {session}"] = await store.fetch_all_chats(u, session)
            for agent in AGENTS:
                key = ChatKey(u, session, agent)
                head = await store.head(key)
                checkpoint = await store.load_checkpoint(key)
                records = await store.fetch_records(key)
                seen[f"{key}"] = (
                    await store.fetch(key),
                    await store.fetch(key, limit=2),
                    head.last_seq > 0,
                    bool(head.epoch),
                    head.checkpoint_version,
                    None if checkpoint is None else (checkpoint.version, checkpoint.messages),
                    [(r.kind, r.id, r.created_at) for r in records],
                    len((await store.fetch_since(key, 0)).messages),
                )
    return seen


@pytest.mark.anyio
@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_operations())
async def test_every_ability_matches_the_memory_reference(
    postgres_dsn: str, ops: list[tuple[Any, ...]]
) -> None:
    clock = FakeClock()
    options: dict[str, Any] = {"retention": 150, "purge_interval": 90, "clock": clock}
    reference = InMemoryChatStorage(**options)
    suffix = ""
    schema = f"ref_{uuid.uuid4().hex[:12]}"  # purges see the whole table: one per example
    async with PostgresChatStorage(postgres_dsn, schema=schema, **options) as store:
        for op in ops:
            if op[0] == "advance":
                clock.advance(op[1])
                continue
            expected = await _apply(reference, op, clock, suffix)
            got = await _apply(store, op, clock, suffix)
            assert got == expected, f"{op!r}: {got!r} != {expected!r}"
        assert await _observe(store, suffix) == await _observe(reference, suffix)
