"""LangChainChatMessageHistory against real langchain-core: message round trips, the sync and
async history methods, and ``RunnableWithMessageHistory`` with langchain-core's fake chat
model."""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages import ChatMessage as LCChatMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from storage.adapters.langchain import (
    LangChainChatMessageHistory,
    from_chat_message,
    to_chat_message,
)
from storage.errors import InvalidMessageError
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from storage.sync import SyncChatStorage

pytestmark = pytest.mark.filterwarnings("ignore:.*RunnableWithMessageHistory is deprecated")

KEY = ChatKey("user-1", "session-1", "chat")

MESSAGES: list[BaseMessage] = [
    SystemMessage("You are helpful."),
    HumanMessage("hi"),
    HumanMessage("hi again", id="h-1", name="ada"),
    HumanMessage(
        content=[
            "a bare string part",
            {"type": "text", "text": "a text part"},
            {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
        ]
    ),
    AIMessage(
        "",
        id="run-1",
        tool_calls=[
            {"name": "get_weather", "args": {"city": "Paris", "days": [1, 2]}, "id": "call_1"},
            {"name": "now", "args": {}, "id": None},
        ],
        response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 3, "output_tokens": 5, "total_tokens": 8},
        additional_kwargs={"refusal": None},
    ),
    ToolMessage("sunny", tool_call_id="call_1", name="get_weather"),
    ToolMessage(
        "failed", tool_call_id="call_2", status="error", artifact={"raw": [1, 2], "ok": False}
    ),
    AIMessage(
        "bad call",
        invalid_tool_calls=[
            {
                "name": "f",
                "args": "{not json",
                "id": "c9",
                "error": "bad",
                "type": "invalid_tool_call",
            }
        ],
    ),
    AIMessage("It is sunny.", id="run-2", name="assistant"),
    LCChatMessage(role="assistant", content="from a ChatMessage"),
    AIMessageChunk(content="a chunk", id="chunk-1"),
]


def test_messages_round_trip_exactly() -> None:
    for message in MESSAGES:
        stored = to_chat_message(message)
        assert from_chat_message(stored) == message, message


def test_mapping_uses_the_chat_fields() -> None:
    ai = to_chat_message(MESSAGES[4])
    assert ai.role == "assistant"
    assert ai.id == "run-1"
    assert ai.tool_calls == (
        ToolCall("call_1", "get_weather", '{"city": "Paris", "days": [1, 2]}'),
        ToolCall("", "now", "{}"),
    )
    tool = to_chat_message(MESSAGES[5])
    assert (tool.role, tool.content, tool.tool_call_id, tool.name) == (
        "tool",
        "sunny",
        "call_1",
        "get_weather",
    )
    human = to_chat_message(HumanMessage("plain"))
    assert (human.role, human.content) == ("user", "plain")
    assert dict(human.metadata) == {"langchain": {"no_id": True}}
    assert to_chat_message(SystemMessage("s")).role == "system"


def test_messages_from_other_writers_convert() -> None:
    calls = [ToolCall("c1", "f", '{"a": 1}'), ToolCall("c2", "g", "x")]
    assistant = ChatMessage("assistant", None, calls)
    converted = from_chat_message(assistant)
    assert isinstance(converted, AIMessage)
    assert converted.content == ""
    assert converted.tool_calls == [
        {"name": "f", "args": {"a": 1}, "id": "c1", "type": "tool_call"}
    ]
    assert converted.invalid_tool_calls[0]["args"] == "x"
    summary = ChatMessage("system", "Summary.", metadata={"chatlayers": {"summary": True}})
    assert from_chat_message(summary) == SystemMessage("Summary.", id=summary.id)
    tool = from_chat_message(ChatMessage("tool", "r", tool_call_id="c1"))
    assert isinstance(tool, ToolMessage)
    assert tool.tool_call_id == "c1"


@pytest.mark.parametrize(
    "message",
    [FunctionMessage(content="x", name="f"), LCChatMessage(role="critic", content="x")],
    ids=["function", "unknown-role"],
)
def test_messages_without_a_chat_role_are_refused(message: BaseMessage) -> None:
    with pytest.raises(InvalidMessageError, match="no chat role"):
        to_chat_message(message)


@pytest.mark.anyio
async def test_async_methods(tmp_path: Path) -> None:
    async with SQLiteChatStorage(tmp_path / "chats.db") as store:
        history = LangChainChatMessageHistory(store, KEY)
        assert await history.aget_messages() == []
        await history.aadd_messages(MESSAGES[:5])
        await history.aadd_messages(MESSAGES[5:])
        assert await history.aget_messages() == MESSAGES
        # A LangChain id is the message id: adding the same message again stores nothing.
        await history.aadd_messages([MESSAGES[-3]])
        assert len(await history.aget_messages()) == len(MESSAGES)
        limited = LangChainChatMessageHistory(store, KEY, limit=2)
        assert await limited.aget_messages() == MESSAGES[-2:]
        with pytest.raises(InvalidMessageError):
            await history.aadd_messages(
                [HumanMessage("ok"), FunctionMessage(content="x", name="f")]
            )
        assert len(await history.aget_messages()) == len(MESSAGES)
        await history.aclear()
        assert await history.aget_messages() == []


def test_sync_methods_with_a_shared_portal(tmp_path: Path) -> None:
    with SyncChatStorage(SQLiteChatStorage(tmp_path / "chats.db")) as chats:
        history = LangChainChatMessageHistory(chats, KEY)
        assert history.messages == []
        history.add_messages(MESSAGES)
        history.add_user_message("and one more")
        assert history.messages[:-1] == MESSAGES
        assert history.messages[-1].content == "and one more"
        # Another history object over the same stack sees the same conversation.
        assert LangChainChatMessageHistory(chats, KEY).messages == history.messages
        history.clear()
        assert history.messages == []


def test_sync_methods_on_a_plain_stack_start_and_stop_their_own_portal() -> None:
    def portals() -> int:
        return sum(t.name == "chatlayers-sync-portal" for t in threading.enumerate())

    before = portals()
    history = LangChainChatMessageHistory(InMemoryChatStorage(), KEY)
    assert portals() == before  # nothing started until a sync call
    history.add_messages([HumanMessage("hi")])
    assert [m.content for m in history.messages] == ["hi"]
    assert portals() == before + 1
    sync = history.sync
    del history
    gc.collect()
    assert sync.closed
    assert portals() == before


def _recording_chain(replies: list[Any], seen: list[list[BaseMessage]]) -> Any:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are helpful."), MessagesPlaceholder("history"), ("human", "{question}")]
    )

    def record(value: Any) -> Any:
        seen.append(value.to_messages())
        return value

    model = GenericFakeChatModel(messages=iter(replies))
    return prompt | RunnableLambda(record) | model


def test_runnable_with_message_history_sync(tmp_path: Path) -> None:
    seen: list[list[BaseMessage]] = []
    chain = _recording_chain(["Hello Ada!", "You are Ada."], seen)
    with SyncChatStorage(SQLiteChatStorage(tmp_path / "chats.db")) as chats:
        with_history = RunnableWithMessageHistory(
            chain,
            lambda session_id: LangChainChatMessageHistory(
                chats, ChatKey("ada", session_id, "chat")
            ),
            input_messages_key="question",
            history_messages_key="history",
        )
        config: Any = {"configurable": {"session_id": "s1"}}
        assert with_history.invoke({"question": "I am Ada."}, config).content == "Hello Ada!"
        assert with_history.invoke({"question": "Who am I?"}, config).content == "You are Ada."
        # The second call's prompt carried the first exchange, read back from the store.
        assert [m.content for m in seen[1]] == [
            "You are helpful.",
            "I am Ada.",
            "Hello Ada!",
            "Who am I?",
        ]
        stored = chats.fetch(ChatKey("ada", "s1", "chat"))
        assert [(m.role, m.text) for m in stored] == [
            ("user", "I am Ada."),
            ("assistant", "Hello Ada!"),
            ("user", "Who am I?"),
            ("assistant", "You are Ada."),
        ]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # langchain-core's async is asyncio
@pytest.mark.anyio
async def test_runnable_with_message_history_async_with_tool_calls(tmp_path: Path) -> None:
    seen: list[list[BaseMessage]] = []
    call = AIMessage(
        "", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"}]
    )
    chain = _recording_chain([call, "Sunny, as the tool said."], seen)
    async with SQLiteChatStorage(tmp_path / "chats.db") as store:
        with_history = RunnableWithMessageHistory(
            chain,
            lambda session_id: LangChainChatMessageHistory(store, ChatKey("u", session_id, "chat")),
            input_messages_key="question",
            history_messages_key="history",
        )
        config: Any = {"configurable": {"session_id": "s1"}}
        first = await with_history.ainvoke({"question": "Weather in Paris?"}, config)
        assert first.tool_calls[0]["args"] == {"city": "Paris"}
        history = LangChainChatMessageHistory(store, ChatKey("u", "s1", "chat"))
        await history.aadd_messages([ToolMessage("sunny", tool_call_id="call_1")])
        second = await with_history.ainvoke({"question": "So?"}, config)
        assert second.content == "Sunny, as the tool said."
        replayed = seen[1]
        assert isinstance(replayed[2], AIMessage)
        assert replayed[2].tool_calls == first.tool_calls
        assert isinstance(replayed[3], ToolMessage)
        assert replayed[3].tool_call_id == "call_1"
        stored = await store.fetch(ChatKey("u", "s1", "chat"))
        assert [m.role for m in stored] == ["user", "assistant", "tool", "user", "assistant"]
        assert stored[1].tool_calls == (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)


def test_developer_messages_read_as_system_messages() -> None:
    from langchain_core.messages import SystemMessage

    from storage.adapters.langchain import from_chat_message

    converted = from_chat_message(ChatMessage("developer", "Be brief."))
    assert isinstance(converted, SystemMessage)
    assert converted.content == "Be brief."
