"""The fast read path: trusted decoding, the SQLite decoded-message cache, batched inserts.

The cache must never change what a fetch returns: whatever another connection (another
process) saves or deletes, and whatever the budget, a fetch equals what a store without a
cache returns. These tests check that against ``cache_chars=0`` and the memory store.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.codec import DecodeCache, decode, encode
from storage.message import ChatKey, ChatMessage, ToolCall, with_created_at
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from tests.paths import REPO

DATA = REPO / "examples" / "data"
KEY = ChatKey("u", "s", "a")
NOW = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def shipped() -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for path in sorted(DATA.glob("*.openai.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            out.extend(
                ChatMessage.from_openai(w, created_at=NOW) for w in json.loads(line)["messages"]
            )
    return out


def odd_messages() -> list[ChatMessage]:
    """Messages with every optional field: parts, metadata, extra fields, several calls."""
    return [
        ChatMessage.from_openai(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image_url", "image_url": {"url": "x"}},
                ],
                "name": "ann",
            },
            created_at=NOW,
            metadata={"k": [1, {"n": None}], "chatlayers": {"summary": True}},
        ),
        ChatMessage.from_openai(
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "audio": {"id": "a1"},
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{ "a" :1 }'},
                    },
                    {"id": "c2", "function": {"name": "g", "arguments": ""}},
                ],
            },
            created_at=NOW,
        ),
        ChatMessage("tool", "ok", tool_call_id="c1", created_at=NOW + timedelta(microseconds=1)),
        ChatMessage("assistant", "built in code", created_at=NOW),
    ]


def test_decode_builds_the_same_frozen_message_as_the_constructor() -> None:
    for message in [*shipped(), *odd_messages()]:
        decoded = decode(encode(message))
        assert type(decoded) is ChatMessage
        assert decoded == message
        for field in attrs.fields(ChatMessage):
            mine, theirs = getattr(decoded, field.name), getattr(message, field.name)
            assert type(mine) is type(theirs), field.name
        assert decoded.to_openai() == message.to_openai()
        assert all(type(c) is ToolCall for c in decoded.tool_calls)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            decoded.role = "user"  # type: ignore[misc]
        with pytest.raises(TypeError):
            decoded.metadata["x"] = 1  # type: ignore[index]


def test_with_created_at_equals_evolve() -> None:
    for message in odd_messages():
        later = NOW + timedelta(days=1)
        assert with_created_at(message, later) == attrs.evolve(message, created_at=later)


def test_decode_cache_keeps_to_its_budget_and_never_floods() -> None:
    records = [encode(m) for m in shipped()[:200]]
    size = sum(len(r) for r in records)
    cache = DecodeCache(size // 4)
    out = cache.decode_rows(list(enumerate(records)))
    assert out == [decode(r) for r in records]
    # One read fills at most half the budget, with its newest rows.
    assert 0 < cache._chars <= size // 8
    assert max(cache.messages) == 199
    assert cache.decode_rows([(199, None)]) == [out[199]]
    with pytest.raises(KeyError):
        cache.decode_rows([(0, None)])
    cache.discard([199])
    assert 199 not in cache.messages
    with pytest.raises(ValueError, match="max_chars"):
        DecodeCache(-1)


@pytest.mark.anyio
async def test_other_connection_sees_every_save_and_delete(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    reader = SQLiteChatStorage(path)
    writer = SQLiteChatStorage(path)  # stands for another process
    plain = SQLiteChatStorage(path, cache_chars=0)
    messages = shipped()[:60]
    try:
        await writer.save_messages(KEY, messages[:30])
        assert await reader.fetch(KEY) == messages[:30]
        assert len(reader._cache) == 30
        await writer.save_messages(KEY, messages[30:40])
        assert await reader.fetch(KEY) == messages[:40] == await plain.fetch(KEY)
        assert await reader.fetch(KEY, limit=7) == await plain.fetch(KEY, limit=7)
        await writer.delete(KEY)
        assert await reader.fetch(KEY) == []
        assert await reader.fetch(KEY, limit=5) == []
        # The same ids saved again get new sequence numbers: read as new rows.
        again = [attrs.evolve(m, created_at=NOW + timedelta(seconds=1)) for m in messages[:10]]
        await writer.save_messages(KEY, again)
        assert await reader.fetch(KEY) == again == await plain.fetch(KEY)
        assert await reader.fetch_all_chats("u", "s") == await plain.fetch_all_chats("u", "s")
    finally:
        for store in (reader, writer, plain):
            await store.aclose()


@pytest.mark.anyio
async def test_delete_user_forgets_decoded_messages(tmp_path: Path) -> None:
    store = SQLiteChatStorage(tmp_path / "chats.db")
    other = ChatKey("v", "s", "a")
    messages = shipped()[:8]
    try:
        await store.save_messages(KEY, messages[:5])
        await store.save_messages(other, messages[5:8])
        await store.fetch(KEY)
        await store.fetch(other)
        assert len(store._cache) == 8
        await store.delete_user("u")
        assert len(store._cache) == 3
        assert {m.id for m in store._cache.messages.values()} == {m.id for m in messages[5:8]}
        await store.delete(other)
        assert len(store._cache) == 0
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_retried_batch_stores_only_the_new_messages(tmp_path: Path) -> None:
    store = SQLiteChatStorage(tmp_path / "chats.db")
    messages = shipped()[:10]
    try:
        assert await store.save_messages(KEY, messages[:6]) == messages[:6]
        # Ids 3..5 are stored already: executemany sees fewer inserts and redoes row by row.
        assert await store.save_messages(KEY, messages[3:10]) == messages[6:10]
        assert await store.save_messages(KEY, messages) == []
        assert await store.save(KEY, messages[0]) == []
        assert await store.fetch(KEY) == messages
    finally:
        await store.aclose()


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("save"), st.integers(0, 2), st.integers(1, 12)),
        st.tuples(st.just("fetch"), st.integers(0, 2), st.one_of(st.none(), st.integers(0, 15))),
        st.tuples(st.just("delete"), st.integers(0, 2), st.none()),
        st.tuples(st.just("delete_user"), st.integers(0, 1), st.none()),
    ),
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, budget=st.sampled_from([0, 600, 5_000, 10**7]))
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_cached_reads_match_a_model(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, int, int | None]],
    budget: int,
) -> None:
    """Random saves, fetches and deletes through two connections (one with a small cache)
    always read exactly what the memory store holds."""
    path = tmp_path_factory.mktemp("db") / "chats.db"
    keys = [ChatKey("u0", "s", "a"), ChatKey("u0", "s", "b"), ChatKey("u1", "s", "a")]
    source = shipped()
    cursor = 0
    model = InMemoryChatStorage()
    cached = SQLiteChatStorage(path, cache_chars=budget)
    writer = SQLiteChatStorage(path)
    try:
        for step, (op, k, arg) in enumerate(ops):
            key = keys[k]
            if op == "save":
                assert arg is not None
                batch = source[cursor : cursor + arg]
                cursor = (cursor + arg) % (len(source) - 12)
                target = cached if step % 2 else writer
                assert await target.save_messages(key, batch) == await model.save_messages(
                    key, batch
                )
            elif op == "fetch":
                assert await cached.fetch(key, limit=arg) == await model.fetch(key, limit=arg)
            elif op == "delete":
                await writer.delete(key)
                await model.delete(key)
            else:
                await writer.delete_user(f"u{k}")
                await model.delete_user(f"u{k}")
        for key in keys:
            assert await cached.fetch(key) == await model.fetch(key)
    finally:
        await cached.aclose()
        await writer.aclose()
