"""Adapters' edits against an append landing after their version check, on every store.

OpenAI Agents' ``pop_item`` and LlamaIndex's deletes rewrite the record with
``replace(..., expected_version=...)``; another worker (a second store instance over the same
data) appends right before that ``replace`` reaches the store. Without the store's
compare-and-replace the append would be erased; with it the edit retries on the new record.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("agents")
pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage as LlamaMessage

from storage.adapters.llama_index import LlamaIndexChatStore
from storage.adapters.llama_index_memory import LlamaIndexMemoryStore
from storage.adapters.openai_agents import OpenAIAgentsSession
from storage.message import ChatKey
from storage.protocol import ChatStorage
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from tests.adapters.racing import AppendsBeforeReplace

KEY = ChatKey("user-1", "session-1", "assistant")
STORES = ["memory", "sqlite", "jsonl", "redis", "postgresql"]

pytestmark = pytest.mark.anyio

Opener = Callable[[], ChatStorage]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py and asyncpg are asyncio-only


@pytest.fixture(params=STORES)
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """``open()`` makes a store instance over the test's data (one shared instance for
    memory, which keeps no data across instances)."""
    kind: str = request.param
    opened: list[ChatStorage] = []
    memory = InMemoryChatStorage()

    def open() -> ChatStorage:
        if kind == "memory":
            return memory
        store: ChatStorage
        if kind == "sqlite":
            store = SQLiteChatStorage(tmp_path / "chats.db")
        elif kind == "jsonl":
            store = JsonlChatStorage(tmp_path / "chats")
        elif kind == "redis":
            from storage.stores.redis import RedisChatStorage

            store = RedisChatStorage(request.getfixturevalue("redis_url"), prefix=prefix)
        else:
            from storage.stores.postgres import PostgresChatStorage

            dsn = request.getfixturevalue("postgres_dsn")
            store = PostgresChatStorage(dsn, schema=prefix.replace("-", "_"))
        opened.append(store)
        return store

    prefix = f"car-{uuid.uuid4().hex[:12]}"
    try:
        yield open
    finally:
        for store in opened:
            await store.aclose()
        await memory.aclose()


async def test_pop_item_keeps_an_item_appended_before_its_replace(open_store: Opener) -> None:
    two = OpenAIAgentsSession(open_store(), KEY)

    async def append() -> None:
        await two.add_items([{"role": "user", "content": "late"}])

    racing = AppendsBeforeReplace(open_store(), append, times=0)
    one = OpenAIAgentsSession(racing, KEY)
    await one.add_items([{"role": "user", "content": f"m{n}"} for n in range(3)])
    racing.times = 1
    assert await one.pop_item() == {"role": "user", "content": "m2"}
    assert racing.times == 0  # the append did land in the window
    assert [cast("dict[str, Any]", i)["content"] for i in await two.get_items()] == [
        "m0",
        "m1",
        "late",
    ]


async def test_llama_index_deletes_keep_a_message_appended_before_their_replace(
    open_store: Opener,
) -> None:
    two = LlamaIndexChatStore(open_store(), user_id="u")
    counter = iter(range(10))

    async def append() -> None:
        await two.async_add_message("c", LlamaMessage(role="user", content=f"late {next(counter)}"))

    racing = AppendsBeforeReplace(open_store(), append, times=0)
    one = LlamaIndexChatStore(racing, user_id="u")
    await one.aset_messages("c", [LlamaMessage(role="user", content=f"m{n}") for n in range(4)])
    racing.times = 1
    removed = await one.adelete_message("c", 1)
    assert removed is not None
    assert removed.content == "m1"
    racing.times = 1
    last = await one.adelete_last_message("c")
    assert last is not None
    assert last.content == "late 0"
    got = [m.content for m in await two.aget_messages("c")]
    assert got == ["m0", "m2", "m3", "late 1"]


async def test_llama_index_memory_deletes_keep_a_message_appended_before_their_replace(
    open_store: Opener,
) -> None:
    two = LlamaIndexMemoryStore(open_store(), user_id="u")

    async def append() -> None:
        await two.add_message("s", LlamaMessage(role="user", content="late"))

    racing = AppendsBeforeReplace(open_store(), append, times=0)
    one = LlamaIndexMemoryStore(racing, user_id="u")
    await one.add_messages("s", [LlamaMessage(role="user", content=f"m{n}") for n in range(4)])
    racing.times = 1
    removed = await one.delete_message("s", 2)
    assert removed is not None
    assert removed.content == "m2"
    assert [m.content for m in await two.get_messages("s")] == ["m0", "m1", "m3", "late"]
