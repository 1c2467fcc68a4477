"""Abilities on Redis against the in-memory reference store: random mixes of saves, replaces,
conditional saves, records, deletes and reads give the same results on both (sequence
numbers and epochs are each store's own, so they are compared by what they mean).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.abilities import ConversationRecord
from storage.errors import ConflictError
from storage.message import ChatKey, ChatMessage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.redis import RedisChatStorage

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.redis

T0 = datetime(2024, 5, 1, tzinfo=UTC)
USERS = ("u", "u:*")
SESSIONS = ("s", "s{1}", "s/2")
AGENTS = ("a", "b?")
WORDS = ("alpha", "beta", "gamma")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _keys() -> Any:
    return st.builds(
        ChatKey, st.sampled_from(USERS), st.sampled_from(SESSIONS), st.sampled_from(AGENTS)
    )


def _messages() -> Any:
    one = st.builds(
        lambda word, n, mid: ChatMessage(
            "user", f"{word} {n}", id=f"id{mid}", created_at=T0 + timedelta(microseconds=n)
        ),
        st.sampled_from(WORDS),
        st.integers(0, 4),
        st.integers(0, 15),
    )
    return st.lists(one, max_size=4)


def operations() -> Any:
    return st.lists(
        st.one_of(
            st.tuples(st.just("save"), _keys(), _messages()),
            st.tuples(st.just("replace"), _keys(), _messages()),
            st.tuples(st.just("save_if"), _keys(), _messages(), st.booleans()),
            st.tuples(st.just("record"), _keys(), st.integers(0, 3)),
            st.tuples(st.just("delete"), _keys()),
            st.tuples(st.just("delete_user"), st.sampled_from(USERS)),
        ),
        max_size=20,
    )


async def _pages(store: Any, user: str) -> list[Any]:
    out = []
    cursor = None
    while True:
        page = await store.list_sessions(user, limit=2, cursor=cursor)
        out.append(page.sessions)
        cursor = page.next_cursor
        if cursor is None:
            return out


async def _observe(store: Any, run: str) -> list[Any]:
    seen: list[Any] = []
    for user in USERS:
        seen.append(await _pages(store, user + run))
        hits = await store.search(user + run, "alpha beta", limit=50)
        # Hits of equal score may come in either order (a store's own tie order).
        seen.append(sorted((-round(h.score, 9), str(h.key), h.message.id, h.snippet) for h in hits))
        for session in SESSIONS:
            for agent in AGENTS:
                key = ChatKey(user + run, session, agent)
                tail = await store.fetch_since(key, 0)
                head = await store.head(key)
                assert tail.head == head
                assert list(tail.seqs) == sorted(set(tail.seqs))
                assert (head.last_seq == (tail.seqs[-1] if tail.seqs else 0)) is True
                records = await store.fetch_records(key)
                seen.append(
                    (
                        list(tail.messages),
                        bool(head.epoch),
                        [(r.id, r.kind, dict(r.data), r.created_at) for r in records],
                    )
                )
        seen.append(await store.list_keys(user + run))
    return seen


async def _apply(store: Any, op: tuple[Any, ...], run: str) -> Any:
    name = op[0]
    if name == "delete_user":
        return await store.delete_user(op[1] + run)
    key = ChatKey(op[1].user_id + run, op[1].session_id, op[1].agent_id)
    if name == "save":
        return await store.save_messages(key, op[2])
    if name == "replace":
        return await store.replace(key, op[2])
    if name == "save_if":
        version = (await store.head(key)).version if op[3] else "stale.1"
        try:
            return await store.save_messages_if(key, op[2], expected_version=version)
        except ConflictError:
            return "conflict"
    if name == "record":
        record = ConversationRecord(
            "k", {"n": op[2]}, id=f"r{op[2]}", created_at=T0 + timedelta(seconds=op[2])
        )
        stored = await store.save_record(key, record)
        return (stored.id, stored.kind, dict(stored.data), stored.created_at)
    return await store.delete(key)


async def _same(store: RedisChatStorage, ops: list[tuple[Any, ...]]) -> None:
    run = uuid.uuid4().hex[:8]
    memory = InMemoryChatStorage()
    for op in ops:
        assert await _apply(store, op, run) == await _apply(memory, op, run), op
    assert await _observe(store, run) == await _observe(memory, run)


@pytest.mark.anyio
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations())
async def test_abilities_same_as_memory(redis_url: str, ops: list[tuple[Any, ...]]) -> None:
    async with RedisChatStorage(redis_url, prefix="diff-abilities") as s:
        await _same(s, ops)


@pytest.mark.anyio
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations())
async def test_cluster_abilities_same_as_memory(
    redis_cluster_url: str, ops: list[tuple[Any, ...]]
) -> None:
    async with RedisChatStorage(redis_cluster_url, prefix="diff-abilities", cluster=True) as s:
        await _same(s, ops)
