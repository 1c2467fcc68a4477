"""LlamaIndexChatStore against real llama-index-core: every chat-store method compared with
LlamaIndex's own SimpleChatStore, its ChatMemoryBuffer on top, lossless block round trips,
scrubbing, and a restart over SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.base.llms.types import (
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.storage.chat_store import SimpleChatStore
from llama_index.core.storage.chat_store.base import BaseChatStore
from llama_index.core.storage.chat_store.base_db import MessageStatus

from storage.adapters.llama_index import LlamaIndexChatStore, from_chat_message, to_chat_message
from storage.adapters.llama_index_memory import LlamaIndexMemoryStore
from storage.config import open_storage
from storage.errors import InvalidMessageError
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from storage.sync import SyncChatStorage

SHAPES: list[LlamaMessage] = [
    LlamaMessage(role="system", content="You are a travel agent."),
    LlamaMessage(role="user", content="Book me a flight to Oslo."),
    LlamaMessage(
        role="assistant",
        blocks=[
            TextBlock(text="Searching."),
            ToolCallBlock(tool_call_id="c1", tool_name="search", tool_kwargs={"city": "Oslo"}),
        ],
    ),
    LlamaMessage(role="tool", content='{"flights": 3}', additional_kwargs={"tool_call_id": "c1"}),
    LlamaMessage(
        role="assistant",
        content=None,
        additional_kwargs={
            "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "book", "arguments": "{}"}}
            ]
        },
    ),
    LlamaMessage(
        role="tool", content="booked", additional_kwargs={"tool_call_id": "c2", "name": "book"}
    ),
    LlamaMessage(
        role="user",
        blocks=[TextBlock(text="Is this the plane?"), ImageBlock(url="https://x.test/p.png")],
    ),
    LlamaMessage(
        role="assistant",
        blocks=[ThinkingBlock(content="look at it"), TextBlock(text="Yes."), TextBlock(text="!")],
    ),
    LlamaMessage(role=MessageRole.CHATBOT, content="legacy role"),
    LlamaMessage(role="user", content="", additional_kwargs={"ui": {"lang": "nb"}}),
]


@pytest.fixture
def ours() -> Iterator[LlamaIndexChatStore]:
    with SyncChatStorage(InMemoryChatStorage()) as sync:
        yield LlamaIndexChatStore(sync, user_id="user-1")


def test_is_a_base_chat_store(ours: LlamaIndexChatStore) -> None:
    assert isinstance(ours, BaseChatStore)


@pytest.mark.parametrize("index", range(len(SHAPES)))
def test_every_shape_round_trips_exactly(index: int) -> None:
    message = SHAPES[index]
    assert from_chat_message(to_chat_message(message)) == message
    # A plain shape carries no metadata at all.
    if index in (0, 1):
        assert not to_chat_message(message).metadata


def test_texts_and_calls_live_in_the_message_fields() -> None:
    stored = [to_chat_message(m) for m in SHAPES]
    assert stored[2].content == "Searching."
    assert [(c.id, c.name, c.arguments) for c in stored[2].tool_calls] == [
        ("c1", "search", '{"city": "Oslo"}')
    ]
    assert stored[3].role == "tool"
    assert stored[3].tool_call_id == "c1"
    assert stored[4].tool_calls[0].name == "book"
    assert stored[6].text == "Is this the plane?"
    assert stored[8].role == "assistant"
    with pytest.raises(InvalidMessageError, match="LlamaIndex ChatMessage"):
        to_chat_message("hello")  # type: ignore[arg-type]


def _script(store: BaseChatStore) -> list[Any]:
    """The same operations on any BaseChatStore; every result is recorded (as a copy:
    SimpleChatStore hands out its own list, which later calls mutate)."""
    seen: list[Any] = []
    store.set_messages("s1", SHAPES[:4])
    seen.append(list(store.get_messages("s1")))
    store.add_message("s1", SHAPES[4])
    store.add_message("s1", SHAPES[5])
    seen.append(list(store.get_messages("s1")))
    store.set_messages("s1", [*SHAPES[:6], SHAPES[6]])  # re-set what it had plus one
    seen.append(list(store.get_messages("s1")))
    seen.append(store.delete_message("s1", 6))
    seen.append(store.delete_message("s1", 99))
    seen.append(store.delete_last_message("s1"))
    seen.append(list(store.get_messages("s1")))
    store.add_message("s2", SHAPES[1])
    seen.append(sorted(store.get_keys()))
    seen.append(store.delete_messages("s2"))
    seen.append(store.delete_messages("never"))
    seen.append(store.delete_last_message("never"))
    seen.append(store.get_messages("never"))
    store.set_messages("s1", SHAPES[7:9])  # not a continuation: a rewrite
    seen.append(list(store.get_messages("s1")))
    return seen


def test_same_results_as_simple_chat_store_item_by_item(ours: LlamaIndexChatStore) -> None:
    expected = _script(SimpleChatStore())
    got = _script(ours)
    assert len(got) == len(expected)
    for n, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, n


def test_insert_at_an_index_like_simple_chat_store(ours: LlamaIndexChatStore) -> None:
    native = SimpleChatStore()
    for store in (native, ours):
        store.set_messages("k", [SHAPES[1], SHAPES[8]])
        store.add_message("k", SHAPES[9], idx=1)
    assert ours.get_messages("k") == native.get_messages("k")


def test_chat_memory_buffer_on_top(ours: LlamaIndexChatStore) -> None:
    def run(store: BaseChatStore) -> tuple[Any, Any]:
        memory = ChatMemoryBuffer.from_defaults(
            chat_store=store, chat_store_key="conv-1", token_limit=40
        )
        for message in SHAPES[:6]:
            memory.put(message)
        window = memory.get()
        everything = memory.get_all()
        memory.reset()
        return window, (everything, memory.get_all())

    assert run(ours) == run(SimpleChatStore())


@pytest.mark.anyio
async def test_async_methods_and_chat_memory_buffer_async() -> None:
    store = LlamaIndexChatStore(InMemoryChatStorage(), user_id="u")
    memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="conv")
    for message in SHAPES[:4]:
        await memory.aput(message)
    assert await memory.aget_all() == SHAPES[:4]
    assert await store.aget_keys() == ["conv"]
    assert await store.adelete_last_message("conv") == SHAPES[3]
    assert await store.aget_messages("conv") == SHAPES[:3]


@pytest.mark.anyio
async def test_a_scrubbing_stack_stores_scrubbed_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "test-secret-0123456789abcdef")
    async with open_storage("scrub::memory://") as stack:
        store = LlamaIndexChatStore(stack, user_id="u")
        memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="c")
        await memory.aput(LlamaMessage(role="user", content="mail me at ada@example.com"))
        [back] = await memory.aget_all()
        assert "ada@example.com" not in str(back.content)
        assert "<EMAIL_ADDRESS_" in str(back.content)


def test_history_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    with SyncChatStorage(SQLiteChatStorage(db)) as sync:
        memory = ChatMemoryBuffer.from_defaults(
            chat_store=LlamaIndexChatStore(sync, user_id="u"), chat_store_key="c"
        )
        for message in SHAPES:
            memory.put(message)
    with SyncChatStorage(SQLiteChatStorage(db)) as sync:
        memory = ChatMemoryBuffer.from_defaults(
            chat_store=LlamaIndexChatStore(sync, user_id="u"), chat_store_key="c"
        )
        assert memory.get_all() == SHAPES


# --- Memory (LlamaIndex's current memory class) over an AsyncDBChatStore --------------------


def _words(text: str) -> list[str]:
    return text.split()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # LlamaIndex's SQL chat store (the native side) runs on asyncio


async def _memory_script(memory: Memory) -> list[Any]:
    seen: list[Any] = []
    for n in range(12):
        await memory.aput(LlamaMessage(role="user", content=f"question {n} " + "word " * 6))
        await memory.aput(LlamaMessage(role="assistant", content=f"answer {n} " + "word " * 6))
        seen.append(await memory.aget())
    seen.append(await memory.aget_all())
    seen.append(await memory.aget_all(status=MessageStatus.ARCHIVED))
    seen.append(await memory.aget_all(status=None))
    store = memory.sql_store
    seen.append(await store.count_messages(memory.session_id))
    seen.append(await store.get_messages(memory.session_id, status=None, limit=3, offset=2))
    seen.append(await store.delete_oldest_messages(memory.session_id, 2))
    seen.append(await store.get_messages(memory.session_id, status=None))
    await memory.aset(SHAPES[:4])
    seen.append(await memory.aget_all(status=None))
    await store.add_messages(memory.session_id, SHAPES[4:6], status=MessageStatus.ARCHIVED)
    seen.append(await store.count_messages(memory.session_id, status=MessageStatus.ARCHIVED))
    await memory.areset(status=MessageStatus.ACTIVE)
    seen.append(await memory.aget_all(status=None))
    await memory.areset()
    seen.append(await memory.aget_all(status=None))
    seen.append(await store.get_keys())
    return seen


def _memory(chat_store: Any) -> Memory:
    return Memory.from_defaults(
        session_id="conv-1",
        token_limit=60,
        token_flush_size=20,
        chat_history_token_ratio=0.7,
        tokenizer_fn=_words,
        chat_store=chat_store,
    )


@pytest.mark.anyio
async def test_memory_matches_its_sql_store_item_by_item() -> None:
    native = await _memory_script(_memory(None))  # LlamaIndex's SQLAlchemyChatStore
    ours = await _memory_script(_memory(LlamaIndexMemoryStore(InMemoryChatStorage(), user_id="u")))
    assert len(ours) == len(native)
    for n, (a, b) in enumerate(zip(ours, native, strict=True)):
        assert a == b, n
    # The flush really archived: the active window stayed short while the record grew.
    assert len(native[11]) < 24


@pytest.mark.anyio
async def test_memory_archive_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    async with SQLiteChatStorage(db) as stack:
        memory = _memory(LlamaIndexMemoryStore(stack, user_id="u"))
        for n in range(12):
            await memory.aput(LlamaMessage(role="user", content=f"q{n} " + "word " * 8))
        active = await memory.aget_all()
        archived = await memory.aget_all(status=MessageStatus.ARCHIVED)
        assert archived
    async with SQLiteChatStorage(db) as stack:
        memory = _memory(LlamaIndexMemoryStore(stack, user_id="u"))
        assert await memory.aget_all() == active
        assert await memory.aget_all(status=MessageStatus.ARCHIVED) == archived
