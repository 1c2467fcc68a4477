"""LlamaIndex adapters where LlamaIndex's own stores set the bar: tool messages without a
call id, and edits (delete, insert, set) racing a message another worker appends between the
edit's read and its write, over one SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.storage.chat_store import SimpleChatStore
from llama_index.core.storage.chat_store.base_db import MessageStatus

from storage.adapters import rewrite
from storage.adapters.llama_index import LlamaIndexChatStore
from storage.adapters.llama_index_memory import LlamaIndexMemoryStore
from storage.adapters.rewrite import EDIT_ATTEMPTS
from storage.config import open_storage
from storage.errors import ConflictError
from storage.message import ChatKey
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from tests.adapters.racing import AppendsAfterRead


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # LlamaIndex's SQL chat store (the native side) runs on asyncio


pytestmark = pytest.mark.anyio

TOOL_WITHOUT_ID = [
    LlamaMessage(role="user", content="What is six times seven?"),
    LlamaMessage(role="assistant", content="Let me compute."),
    LlamaMessage(role="tool", content="42"),
    LlamaMessage(role="assistant", content="It is 42."),
]


async def test_memory_keeps_a_tool_message_without_a_call_id() -> None:
    def memory(chat_store: Any) -> Memory:
        return Memory.from_defaults(session_id="s", chat_store=chat_store)

    native = memory(None)  # LlamaIndex's SQLAlchemyChatStore
    ours = memory(LlamaIndexMemoryStore(InMemoryChatStorage(), user_id="u"))
    for m in (native, ours):
        await m.aput_messages(TOOL_WITHOUT_ID)
    assert await ours.aget_all() == await native.aget_all() == TOOL_WITHOUT_ID


async def test_chat_memory_buffer_keeps_a_tool_message_without_a_call_id() -> None:
    native = ChatMemoryBuffer.from_defaults(chat_store=SimpleChatStore(), chat_store_key="c")
    ours = ChatMemoryBuffer.from_defaults(
        chat_store=LlamaIndexChatStore(InMemoryChatStorage(), user_id="u"), chat_store_key="c"
    )
    for m in (native, ours):
        await m.aput_messages(TOOL_WITHOUT_ID)
    assert await ours.aget_all() == await native.aget_all() == TOOL_WITHOUT_ID


# --- edits racing an append --------------------------------------------------------------


def texts(messages: list[LlamaMessage]) -> list[str | None]:
    return [m.content for m in messages]


async def two_workers(
    db: Path, times: int = 1
) -> tuple[LlamaIndexChatStore, LlamaIndexChatStore, AppendsAfterRead]:
    """Worker one edits; worker two (another store instance on the file) appends meanwhile."""
    two = LlamaIndexChatStore(SQLiteChatStorage(db), user_id="u")
    counter = iter(range(100))

    async def append() -> None:
        await two.async_add_message("c", LlamaMessage(role="user", content=f"late {next(counter)}"))

    racing = AppendsAfterRead(SQLiteChatStorage(db), append, times=0)
    one = LlamaIndexChatStore(racing, user_id="u")
    await one.aset_messages("c", [LlamaMessage(role="user", content=f"m{n}") for n in range(4)])
    racing.times = times
    return one, two, racing


async def test_delete_last_message_never_erases_a_message_appended_meanwhile(
    tmp_path: Path,
) -> None:
    one, two, _ = await two_workers(tmp_path / "chats.db")
    removed = await one.adelete_last_message("c")
    assert removed is not None
    assert removed.content == "m3"
    assert texts(await two.aget_messages("c")) == ["m0", "m1", "m2", "late 0"]


async def test_delete_message_by_index_never_erases_a_message_appended_meanwhile(
    tmp_path: Path,
) -> None:
    one, two, _ = await two_workers(tmp_path / "chats.db")
    removed = await one.adelete_message("c", 1)
    assert removed is not None
    assert removed.content == "m1"
    assert texts(await two.aget_messages("c")) == ["m0", "m2", "m3", "late 0"]


async def test_insert_never_erases_a_message_appended_meanwhile(tmp_path: Path) -> None:
    one, two, _ = await two_workers(tmp_path / "chats.db")
    await one.async_add_message("c", LlamaMessage(role="user", content="inserted"), idx=1)
    assert texts(await two.aget_messages("c")) == ["m0", "inserted", "m1", "m2", "m3", "late 0"]


async def test_an_edit_that_keeps_conflicting_raises_and_changes_nothing(tmp_path: Path) -> None:
    one, two, racing = await two_workers(tmp_path / "chats.db", times=1000)
    with pytest.raises(ConflictError):
        await one.adelete_message("c", 0)
    racing.times = 0
    got = texts(await two.aget_messages("c"))
    assert got[:4] == ["m0", "m1", "m2", "m3"]  # nothing removed; every append kept
    assert len(got) == 4 + EDIT_ATTEMPTS


async def test_an_edit_pauses_between_tries_and_wins_before_its_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses: list[float] = []
    real = rewrite.back_off

    async def recorded(attempt: int) -> None:
        pauses.append(attempt)
        await real(attempt)

    monkeypatch.setattr(rewrite, "back_off", recorded)
    one, two, _ = await two_workers(tmp_path / "chats.db", times=EDIT_ATTEMPTS - 1)
    removed = await one.adelete_message("c", 0)
    assert removed is not None
    assert removed.content == "m0"
    assert pauses == list(range(1, EDIT_ATTEMPTS))  # one pause before every new try
    got = texts(await two.aget_messages("c"))
    assert got == ["m1", "m2", "m3", *[f"late {n}" for n in range(EDIT_ATTEMPTS - 1)]]
    assert [rewrite.pause_bound(n) for n in (1, 2, 3, 7, 20)] == [0.005, 0.01, 0.02, 0.2, 0.2]


async def test_memory_edits_never_erase_a_message_appended_meanwhile(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    two = LlamaIndexMemoryStore(SQLiteChatStorage(db), user_id="u")

    async def append() -> None:
        await two.add_message("s", LlamaMessage(role="user", content="late"))

    racing = AppendsAfterRead(SQLiteChatStorage(db), append, times=0)
    one = LlamaIndexMemoryStore(racing, user_id="u")
    await one.add_messages("s", [LlamaMessage(role="user", content=f"m{n}") for n in range(4)])
    await one.archive_oldest_messages("s", 1)
    racing.times = 1
    removed = await one.delete_message("s", 2)
    assert removed is not None
    assert removed.content == "m2"
    racing.times = 1
    gone = await one.delete_oldest_messages("s", 1)
    assert texts(gone) == ["m1"]
    assert texts(await two.get_messages("s", status=None)) == ["m0", "m3", "late", "late"]
    assert texts(await two.get_messages("s", status=MessageStatus.ARCHIVED)) == ["m0"]


async def test_two_workers_deleting_the_last_message_at_once_delete_two(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    two = LlamaIndexChatStore(SQLiteChatStorage(db), user_id="u")
    by_two: list[LlamaMessage | None] = []

    async def delete_last() -> None:
        by_two.append(await two.adelete_last_message("c"))

    racing = AppendsAfterRead(SQLiteChatStorage(db), delete_last, times=0)
    one = LlamaIndexChatStore(racing, user_id="u")
    await one.aset_messages("c", [LlamaMessage(role="user", content=f"m{n}") for n in range(4)])
    racing.times = 1  # the other worker deletes right after this one read the record
    by_one = await one.adelete_last_message("c")
    assert texts([m for m in by_two if m is not None]) == ["m3"]
    assert by_one is not None
    assert by_one.content == "m2"  # not m3 a second time
    assert texts(await two.aget_messages("c")) == ["m0", "m1"]


async def test_a_delete_returns_only_what_it_removed(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    two = LlamaIndexChatStore(SQLiteChatStorage(db), user_id="u")

    async def delete_first() -> None:
        await two.adelete_message("c", 1)

    racing = AppendsAfterRead(SQLiteChatStorage(db), delete_first, times=0)
    one = LlamaIndexChatStore(racing, user_id="u")
    await one.aset_messages("c", [LlamaMessage(role="user", content=f"m{n}") for n in range(3)])
    racing.times = 1
    assert await one.adelete_message("c", 1) is None  # m1 was already gone: nothing removed
    assert texts(await two.aget_messages("c")) == ["m0", "m2"]


async def test_two_memories_deleting_the_oldest_at_once_return_what_each_removed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "chats.db"
    two = LlamaIndexMemoryStore(SQLiteChatStorage(db), user_id="u")
    by_two: list[list[LlamaMessage]] = []

    async def delete_oldest() -> None:
        by_two.append(await two.delete_oldest_messages("s", 2))

    racing = AppendsAfterRead(SQLiteChatStorage(db), delete_oldest, times=0)
    one = LlamaIndexMemoryStore(racing, user_id="u")
    await one.add_messages("s", [LlamaMessage(role="user", content=f"m{n}") for n in range(4)])
    racing.times = 1
    by_one = await one.delete_oldest_messages("s", 3)
    assert texts(by_two[0]) == ["m0", "m1"]
    assert texts(by_one) == ["m2"]  # m0 and m1 were removed by the other worker
    assert texts(await two.get_messages("s", status=None)) == ["m3"]


async def test_a_summarized_view_set_back_with_a_new_turn_only_appends(tmp_path: Path) -> None:
    # memory.set(memory.get_all() + [new]) (an agent run given chat_history=...) over a
    # summarizing stack, from another worker: the raw record keeps every message, the summary
    # is not stored in it.
    url = f"summarize?trigger_at=2&keep_last=1::sqlite:///{tmp_path / 'chats.db'}"
    async with open_storage(url) as first, open_storage(url) as second:
        one = LlamaIndexChatStore(first, user_id="u")
        two = LlamaIndexChatStore(second, user_id="u")
        for n in range(6):
            await one.async_add_message("c", LlamaMessage(role="user", content=f"q{n}"))
            await one.async_add_message("c", LlamaMessage(role="assistant", content=f"a{n}"))
        view = await two.aget_messages("c")
        assert len(view) < 12  # a summary and the newest turn
        await two.aset_messages("c", [*view, LlamaMessage(role="user", content="new")])
        # Setting the same list again changes nothing, as with SimpleChatStore.
        await one.aset_messages("c", [*view, LlamaMessage(role="user", content="new")])
        async with SQLiteChatStorage(tmp_path / "chats.db") as store:
            raw = (await store.fetch_since(ChatKey("u", "c", one.agent_id), 0)).messages
        assert [m.text for m in raw] == [
            *(text for n in range(6) for text in (f"q{n}", f"a{n}")),
            "new",
        ]
