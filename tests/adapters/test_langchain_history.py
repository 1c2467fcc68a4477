"""LangChainChatMessageHistory against LangChain's own ``InMemoryChatMessageHistory``, call by
call, sync and async (``langchain-tests`` has no chat-history suite), and two histories of one
conversation over one SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from storage.adapters.langchain import LangChainChatMessageHistory
from storage.message import ChatKey
from storage.stores.sqlite import SQLiteChatStorage
from storage.sync import SyncChatStorage

KEY = ChatKey("user-1", "session-1", "assistant")


def script() -> list[tuple[str, Any]]:
    return [
        ("add_user_message", "Weather in Oslo?"),
        ("add_ai_message", AIMessage("", tool_calls=[{"name": "w", "args": {}, "id": ""}])),
        ("add_message", ToolMessage("sunny", tool_call_id="")),
        ("add_ai_message", "It is sunny."),
        ("add_messages", [SystemMessage("Be brief."), HumanMessage("Thanks", id="h-1")]),
        ("aadd_messages", [AIMessage("You're welcome.", id="a-1", name="bot")]),
    ]


async def replay(history: BaseChatMessageHistory) -> list[Any]:
    seen: list[Any] = []
    for method, argument in script():
        result = getattr(history, method)(argument)
        if method.startswith("aadd"):
            await result
        seen.append(list(history.messages))  # the native history returns its own list
        seen.append(list(await history.aget_messages()))
    seen.append(str(history))
    history.clear()
    seen.append(list(history.messages))
    await history.aadd_messages([HumanMessage("again")])
    await history.aclear()
    seen.append(await history.aget_messages())
    return seen


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # BaseChatMessageHistory's async defaults use asyncio executors


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the native class, deprecated in 1.6
@pytest.mark.anyio
async def test_every_method_gives_what_in_memory_chat_message_history_gives(
    tmp_path: Path,
) -> None:
    expected = await replay(InMemoryChatMessageHistory())
    with SyncChatStorage(SQLiteChatStorage(tmp_path / "chats.db")) as sync:
        got = await replay(LangChainChatMessageHistory(sync, KEY))
    assert len(got) == len(expected)
    for n, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a == b, n


def test_two_histories_of_one_conversation_over_one_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    with (
        SyncChatStorage(SQLiteChatStorage(db)) as one,
        SyncChatStorage(SQLiteChatStorage(db)) as two,
    ):
        first, second = LangChainChatMessageHistory(one, KEY), LangChainChatMessageHistory(two, KEY)
        for n in range(4):
            (first if n % 2 == 0 else second).add_user_message(f"m{n}")
        assert [m.content for m in first.messages] == ["m0", "m1", "m2", "m3"]
        assert second.messages == first.messages
        second.clear()
        assert first.messages == []
