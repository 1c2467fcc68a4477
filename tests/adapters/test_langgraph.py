"""ChatlayersCheckpointer against real LangChain 1.x ``create_agent`` and LangGraph: a
tool-calling agent's thread compared message by message with LangGraph's own InMemorySaver,
a restart over SQLite, scrubbing and summarizing, all with a scripted fake chat model."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO

pytest.importorskip("langgraph")
pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, messages_to_dict
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from storage.adapters.langgraph import ChatlayersCheckpointer
from storage.config import open_storage
from storage.message import ChatKey
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from storage.sync import SyncChatStorage


class ScriptedModel(GenericFakeChatModel):
    """A fake chat model that accepts tools (create_agent binds them) and records its input."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def script(start: int = 1) -> Iterator[AIMessage]:
    if start > 1:
        for n in range(start, start + 40):
            yield AIMessage(f"answer {n}", id=f"ai-{n}")
        return
    yield AIMessage(
        "", id="ai-1", tool_calls=[{"name": "lookup", "args": {"city": "Oslo"}, "id": "call-1"}]
    )
    yield AIMessage("It is sunny in Oslo.", id="ai-2")
    yield AIMessage("You asked about Oslo.", id="ai-3")
    for n in range(4, 40):
        yield AIMessage(f"answer {n}", id=f"ai-{n}")


def agent_with(checkpointer: Any, start: int = 1) -> Any:
    model = ScriptedModel(messages=script(start))
    return create_agent(model, [lookup], checkpointer=checkpointer), model


CONFIG: Any = {"configurable": {"thread_id": "thread-1", "user_id": "user-1"}}


def without_tool_ids(message: dict[str, Any]) -> dict[str, Any]:
    """The tool node gives each result a random id: compare everything else."""
    if message["type"] == "tool":
        return {**message, "data": {k: v for k, v in message["data"].items() if k != "id"}}
    return message


def converse(agent: Any, prompts: Sequence[str]) -> list[dict[str, Any]]:
    for n, prompt in enumerate(prompts):
        agent.invoke({"messages": [HumanMessage(prompt, id=f"human-{n}")]}, CONFIG)
    return messages_to_dict(agent.get_state(CONFIG).values["messages"])


def test_same_thread_messages_as_in_memory_saver_item_by_item() -> None:
    with SyncChatStorage(InMemoryChatStorage()) as sync:
        ours, _ = agent_with(ChatlayersCheckpointer(sync))
        native, _ = agent_with(InMemorySaver())
        prompts = ["Weather in Oslo?", "What did I ask?"]
        got, expected = converse(ours, prompts), converse(native, prompts)
        assert [m["type"] for m in expected] == ["human", "ai", "tool", "ai", "human", "ai"]
        assert len(got) == len(expected)
        stored = sync.fetch(ChatKey("user-1", "thread-1", "agent"))
        # The stack holds the thread, once each, under (user, thread, agent).
        assert [m.id for m in stored] == [m["data"]["id"] for m in got]
        for n, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert without_tool_ids(a) == without_tool_ids(b), n
        # Every older checkpoint holds the messages it had then, as LangGraph's own saver does.
        ours_history = [
            [without_tool_ids(m) for m in messages_to_dict(s.values.get("messages", []))]
            for s in ours.get_state_history(CONFIG)
        ]
        native_history = [
            [without_tool_ids(m) for m in messages_to_dict(s.values.get("messages", []))]
            for s in native.get_state_history(CONFIG)
        ]
        assert len(ours_history) == len(native_history) > 4
        assert ours_history == native_history


async def test_async_invoke_and_a_restart_over_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    async with SQLiteChatStorage(db) as store:
        agent, _ = agent_with(ChatlayersCheckpointer(store))
        await agent.ainvoke({"messages": [HumanMessage("Weather in Oslo?", id="h1")]}, CONFIG)
    # A new process: a new checkpointer (its in-memory bookkeeping is gone), same database.
    async with SQLiteChatStorage(db) as store:
        agent, model = agent_with(ChatlayersCheckpointer(store), start=3)
        await agent.ainvoke({"messages": [HumanMessage("What did I ask?", id="h2")]}, CONFIG)
        # The model saw the earlier turn, restored from the stack.
        assert [m.content for m in model.seen[0]][:2] == ["Weather in Oslo?", ""]
        state = await agent.aget_state(CONFIG)
        ids = [m.id for m in state.values["messages"]]
        assert ids[:2] + ids[3:] == ["h1", "ai-1", "ai-2", "h2", "ai-3"]
        assert len(await store.fetch(ChatKey("user-1", "thread-1", "agent"))) == 6


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # LangGraph runs on asyncio


pytestmark = pytest.mark.anyio


async def test_scrubbed_and_summarized_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "test-secret-0123456789abcdef")
    async with open_storage("summarize?trigger_at=2&keep_last=1::scrub::memory://") as stack:
        agent, model = agent_with(ChatlayersCheckpointer(stack))
        await agent.ainvoke(
            {"messages": [HumanMessage("I am ada@example.com, weather in Oslo?", id="h0")]},
            CONFIG,
        )
        raw = await stack.base.fetch(ChatKey("user-1", "thread-1", "agent"))
        assert "ada@example.com" not in raw[0].text
        assert "<EMAIL_ADDRESS_" in raw[0].text
        for n in range(1, 5):
            await agent.ainvoke({"messages": [HumanMessage(f"turn {n}", id=f"h{n}")]}, CONFIG)
        state = await agent.aget_state(CONFIG)
        first = state.values["messages"][0]
        assert first.type == "system"
        assert first.response_metadata["chatlayers"] == {"summary": True}
        # The summary is never stored as a message of the thread; the raw record has all.
        raw = await stack.base.fetch(ChatKey("user-1", "thread-1", "agent"))
        assert not any(m.is_summary for m in raw)
        assert len(raw) == 4 + 2 * 4
        # The model's last call saw the summarized view, not the whole record.
        assert len(model.seen[-1]) < len(raw)


async def test_delete_thread_erases_the_conversation() -> None:
    store = InMemoryChatStorage()
    saver = ChatlayersCheckpointer(store, user_id="user-1")
    agent, _ = agent_with(saver)
    await agent.ainvoke({"messages": [HumanMessage("hi", id="h")]}, CONFIG)
    assert await store.fetch(ChatKey("user-1", "thread-1", "agent"))
    await saver.adelete_thread("thread-1")
    assert await store.fetch(ChatKey("user-1", "thread-1", "agent")) == []
    assert await saver.aget_tuple(CONFIG) is None


RESUME = """
import sys
from langchain_core.messages import HumanMessage
from storage.adapters.langgraph import ChatlayersCheckpointer
from storage.stores.sqlite import SQLiteChatStorage
from storage.sync import SyncChatStorage
from tests.adapters.test_langgraph import CONFIG, agent_with

db, start, prompt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with SyncChatStorage(SQLiteChatStorage(db)) as chats:
    agent, model = agent_with(ChatlayersCheckpointer(chats), start=start)
    agent.invoke({"messages": [HumanMessage(prompt, id=f"human-{start}")]}, CONFIG)
    print(len(model.seen[0]), [m.id for m in agent.get_state(CONFIG).values["messages"]])
"""


def test_a_thread_resumes_in_a_new_process(tmp_path: Path) -> None:
    import subprocess
    import sys

    db = str(tmp_path / "chats.db")
    repo = REPO
    outputs = []
    for start, prompt in ((1, "Weather in Oslo?"), (3, "What did I ask?")):
        done = subprocess.run(
            [sys.executable, "-c", RESUME, db, str(start), prompt],
            capture_output=True,
            text=True,
            cwd=repo,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.strip())
    seen_first, _ = outputs[0].split(" ", 1)
    seen_second, ids = outputs[1].split(" ", 1)
    assert seen_first == "1"  # a new thread: the model saw only the question
    assert seen_second == "5"  # the second process's model saw the whole first turn
    assert ids.startswith("['human-1', 'ai-1', ")
    assert ids.endswith("'ai-2', 'human-3', 'ai-3']")
