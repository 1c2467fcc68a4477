"""ChatlayersCheckpointer under LangGraph's reducers, compared with LangGraph's own
``InMemorySaver``: ``operator.add`` channels of messages without ids, ``RemoveMessage`` and
``REMOVE_ALL_MESSAGES`` (``SummarizationMiddleware``), messages replaced by id, tool messages
without a call id; two workers over one SQLite file; ``with_allowlist`` and context managers;
and LangGraph's published checkpointer conformance suite."""

from __future__ import annotations

import operator
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Protocol

import pytest

from tests.paths import REPO

pytest.importorskip("langgraph")
pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
    messages_to_dict,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from typing_extensions import TypedDict

from storage.adapters.langgraph import ChatlayersCheckpointer
from storage.config import open_storage
from storage.message import ChatKey
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from storage.sync import SyncChatStorage
from tests.adapters.test_langgraph import ScriptedModel, lookup

CONFIG: Any = {"configurable": {"thread_id": "thread-1", "user_id": "user-1"}}
KEY = ChatKey("user-1", "thread-1", "agent")


def ours(sync: SyncChatStorage) -> ChatlayersCheckpointer:
    return ChatlayersCheckpointer(sync)


def contents(messages: list[BaseMessage]) -> list[tuple[str, Any]]:
    return [(m.type, m.content) for m in messages]


# --- operator.add: messages without ids --------------------------------------------------


class AddState(TypedDict):
    messages: Annotated[list[AnyMessage], operator.add]


def added_graph(checkpointer: Any) -> Any:
    def first(state: AddState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"reply to {state['messages'][-1].content}")]}

    def second(state: AddState) -> dict[str, Any]:
        return {"messages": [AIMessage("and one more")]}

    graph = StateGraph(AddState)
    graph.add_node("first", first)
    graph.add_node("second", second)
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    return graph.compile(checkpointer=checkpointer)


def test_operator_add_channel_without_ids_stores_each_message_once(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    native = added_graph(InMemorySaver())
    with SyncChatStorage(SQLiteChatStorage(db)) as sync:
        graph = added_graph(ours(sync))
        for prompt in ("one", "two"):
            native.invoke({"messages": [HumanMessage(prompt)]}, CONFIG)
            graph.invoke({"messages": [HumanMessage(prompt)]}, CONFIG)
        expected = native.get_state(CONFIG).values["messages"]
        assert len(expected) == 6
        assert graph.get_state(CONFIG).values["messages"] == expected
        assert len(sync.fetch(KEY)) == 6
    # Another process (a new checkpointer, nothing in memory) resumes with the same six.
    with SyncChatStorage(SQLiteChatStorage(db)) as sync:
        graph = added_graph(ours(sync))
        assert graph.get_state(CONFIG).values["messages"] == expected
        graph.invoke({"messages": [HumanMessage("three")]}, CONFIG)
        native.invoke({"messages": [HumanMessage("three")]}, CONFIG)
        assert (
            graph.get_state(CONFIG).values["messages"]
            == native.get_state(CONFIG).values["messages"]
        )
        assert len(sync.fetch(KEY)) == 9


# --- add_messages: RemoveMessage, REMOVE_ALL_MESSAGES, replacing by id -------------------


class MessagesNode(Protocol):
    """A graph node over ``MessagesState`` (LangGraph passes the state as ``state``)."""

    def __call__(self, state: MessagesState) -> dict[str, Any]: ...


def message_id(message: BaseMessage) -> str:
    assert message.id is not None  # add_messages gives every message in the state an id
    return message.id


def trim(state: MessagesState) -> dict[str, Any]:
    """Keep the newest two messages and answer (RemoveMessage by id)."""
    history = state["messages"]
    removed = [RemoveMessage(id=message_id(m)) for m in history[:-2]] if len(history) > 3 else []
    return {"messages": [*removed, AIMessage(f"seen {len(history)}", id=f"re-{history[-1].id}")]}


def compact(state: MessagesState) -> dict[str, Any]:
    """What SummarizationMiddleware returns: remove all, a summary, the kept messages."""
    history = state["messages"]
    if len(history) <= 3:
        return {"messages": [AIMessage(f"seen {len(history)}", id=f"re-{history[-1].id}")]}
    return {
        "messages": [
            RemoveMessage(id=REMOVE_ALL_MESSAGES),
            HumanMessage(f"summary of {len(history) - 1}", id=f"summary-{len(history)}"),
            *history[-1:],
            AIMessage(f"seen {len(history)}", id=f"re-{history[-1].id}"),
        ]
    }


def node_graph(node: MessagesNode, checkpointer: Any) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("node", node)
    graph.add_edge(START, "node")
    graph.add_edge("node", END)
    return graph.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("node", [trim, compact])
def test_removed_messages_stay_removed_as_with_in_memory_saver(
    node: MessagesNode,
) -> None:
    native = node_graph(node, InMemorySaver())
    with SyncChatStorage(InMemoryChatStorage()) as sync:
        graph = node_graph(node, ours(sync))
        for n in range(5):
            for g in (native, graph):
                g.invoke({"messages": [HumanMessage(f"h{n}", id=f"h{n}")]}, CONFIG)
            expected = native.get_state(CONFIG).values["messages"]
            assert graph.get_state(CONFIG).values["messages"] == expected, n
        assert len(expected) <= 4
        # The record stays append-only: every message ever sent is kept.
        assert len(sync.fetch(KEY)) >= 10
        # Time travel sees each step as the native saver does.
        history = [s.values.get("messages", []) for s in graph.get_state_history(CONFIG)]
        native_history = [s.values.get("messages", []) for s in native.get_state_history(CONFIG)]
        assert history == native_history


@pytest.mark.parametrize("node", [trim, compact])
def test_over_a_summarizing_stack_removed_messages_come_back_only_as_the_summary(
    node: MessagesNode,
) -> None:
    native = node_graph(node, InMemorySaver())
    stack = open_storage("summarize?trigger_at=2&keep_last=1::memory://")
    with SyncChatStorage(stack) as sync:
        graph = node_graph(node, ours(sync))
        for n in range(6):
            for g in (native, graph):
                g.invoke({"messages": [HumanMessage(f"h{n}", id=f"h{n}")]}, CONFIG)
            expected = [m.id for m in native.get_state(CONFIG).values["messages"]]
            got = graph.get_state(CONFIG).values["messages"]
            # The graph's messages, in its order; those the stack summarized away are
            # represented by the summary, first; nothing the graph removed is back verbatim.
            kept = [m.id for m in got if not m.response_metadata.get("chatlayers")]
            assert kept == [i for i in expected if i in kept], n
            if len(kept) < len(expected):
                assert got[0].response_metadata["chatlayers"] == {"summary": True}
            assert sum(bool(m.response_metadata.get("chatlayers")) for m in got) <= 1
        assert len(kept) >= 2
        assert got[-1].id == f"re-h{n}"


def test_a_message_replaced_by_id_reads_back_replaced() -> None:
    native = node_graph(trim, InMemorySaver())
    store = InMemoryChatStorage()
    with SyncChatStorage(store, close_stack=False) as sync:
        graph = node_graph(trim, ours(sync))
        for g in (native, graph):
            g.invoke({"messages": [HumanMessage("first", id="h0")]}, CONFIG)
            # A human-in-the-loop edit: the same id with new content.
            g.update_state(CONFIG, {"messages": [HumanMessage("edited", id="h0")]})
            g.invoke({"messages": [HumanMessage("second", id="h1")]}, CONFIG)
        expected = native.get_state(CONFIG).values["messages"]
        assert [m.content for m in expected][:1] == ["edited"]
        assert graph.get_state(CONFIG).values["messages"] == expected
    # A new checkpointer over the same stack reads the edited version too.
    with SyncChatStorage(store) as again:
        assert node_graph(trim, ours(again)).get_state(CONFIG).values["messages"] == expected


def summarizing_agent(checkpointer: Any) -> tuple[Any, ScriptedModel]:
    def answers() -> Iterator[AIMessage]:
        for n in range(100):
            yield AIMessage(f"answer {n}", id=f"ai-{n}")

    def summaries() -> Iterator[AIMessage]:
        for n in range(100):
            yield AIMessage(f"summary {n}")

    model = ScriptedModel(messages=answers())
    middleware = SummarizationMiddleware(
        GenericFakeChatModel(messages=summaries()),
        trigger=("messages", 6),
        keep=("messages", 2),
    )
    return create_agent(model, [lookup], middleware=[middleware], checkpointer=checkpointer), model


def test_create_agent_with_summarization_middleware_shrinks_like_in_memory_saver() -> None:
    native, native_model = summarizing_agent(InMemorySaver())
    with SyncChatStorage(InMemoryChatStorage()) as sync:
        agent, model = summarizing_agent(ours(sync))
        sizes = []
        for n in range(8):
            for a in (native, agent):
                a.invoke({"messages": [HumanMessage(f"question {n}", id=f"h{n}")]}, CONFIG)
            got = agent.get_state(CONFIG).values["messages"]
            assert contents(got) == contents(native.get_state(CONFIG).values["messages"]), n
            sizes.append(len(got))
        assert max(sizes) <= 7
        assert "summary" in str(got[0].content)
        # The models were given the same messages.
        assert [contents(s) for s in model.seen] == [contents(s) for s in native_model.seen]
        assert len(sync.fetch(KEY)) > max(sizes)


def test_edits_reach_another_worker_over_one_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    native = node_graph(trim, InMemorySaver())
    with (
        SyncChatStorage(SQLiteChatStorage(db)) as one,
        SyncChatStorage(SQLiteChatStorage(db)) as two,
    ):
        # Two workers, each with its own in-memory bookkeeping, take turns on one thread.
        workers = [node_graph(trim, ours(one)), node_graph(trim, ours(two))]
        for n in range(6):
            native.invoke({"messages": [HumanMessage(f"h{n}", id=f"h{n}")]}, CONFIG)
            worker = workers[n % 2]
            worker.invoke({"messages": [HumanMessage(f"h{n}", id=f"h{n}")]}, CONFIG)
            expected = native.get_state(CONFIG).values["messages"]
            for w in workers:
                assert w.get_state(CONFIG).values["messages"] == expected, n


# --- tool messages without a call id -----------------------------------------------------


def test_a_tool_call_without_an_id_runs_as_with_in_memory_saver() -> None:
    def script() -> Iterator[AIMessage]:
        yield AIMessage(
            "", id="ai-1", tool_calls=[{"name": "lookup", "args": {"city": "Oslo"}, "id": ""}]
        )
        yield AIMessage("Sunny.", id="ai-2")

    def run(checkpointer: Any) -> list[dict[str, Any]]:
        agent = create_agent(ScriptedModel(messages=script()), [lookup], checkpointer=checkpointer)
        agent.invoke({"messages": [HumanMessage("Oslo?", id="h1")]}, CONFIG)
        state = agent.get_state(CONFIG).values["messages"]
        tool = next(m for m in state if isinstance(m, ToolMessage))
        assert tool.tool_call_id == ""
        return [{**m, "data": {**m["data"], "id": None}} for m in messages_to_dict(state)]

    with SyncChatStorage(InMemoryChatStorage()) as sync:
        assert run(ours(sync)) == run(InMemorySaver())
        # The stored pair is a pair, so a summarizing layer and fetch windows keep it whole.
        stored = sync.fetch(KEY)
        assert stored[2].tool_call_id == stored[1].tool_calls[0].id


# --- serde allowlist and context managers ------------------------------------------------

ALLOWLIST = """
import dataclasses, sys
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.checkpoint.memory import InMemorySaver
from storage.adapters.langgraph import ChatlayersCheckpointer
from storage.stores.memory import InMemoryChatStorage
from storage.sync import SyncChatStorage
from tests.adapters.langgraph_types import Info

class State(MessagesState):
    info: Info

def node(state):
    return {"info": Info(state["info"].n + 1)}

config = {"configurable": {"thread_id": "t"}}
for name in ("native", "ours"):
    with SyncChatStorage(InMemoryChatStorage()) as sync:
        saver = InMemorySaver() if name == "native" else ChatlayersCheckpointer(sync)
        graph = StateGraph(State)
        graph.add_node("node", node)
        graph.add_edge(START, "node")
        graph.add_edge("node", END)
        app = graph.compile(checkpointer=saver)
        app.invoke({"messages": [], "info": Info(1)}, config)
        print(name, type(app.get_state(config).values["info"]).__name__)
"""


def test_with_allowlist_reaches_the_inner_saver() -> None:
    # LangGraph's strict msgpack mode (read at import) derives an allowlist from the state
    # schema and hands it to the checkpointer through with_allowlist().
    done = subprocess.run(
        [sys.executable, "-c", ALLOWLIST],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["native", "Info", "ours", "Info"]


def test_sync_context_manager() -> None:
    store = InMemoryChatStorage()
    with ChatlayersCheckpointer(store) as saver:
        graph = node_graph(trim, saver)
        graph.invoke({"messages": [HumanMessage("hi", id="h0")]}, CONFIG)
        portal = saver.sync
        assert not portal.closed
    assert portal.closed  # the portal the checkpointer started is stopped
    with SyncChatStorage(store) as sync:
        assert [m.id for m in sync.fetch(ChatKey("user-1", "thread-1", "agent"))] == [
            "h0",
            "re-h0",
        ]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # LangGraph runs on asyncio


@pytest.mark.anyio
async def test_async_context_manager(tmp_path: Path) -> None:
    async with (
        SQLiteChatStorage(tmp_path / "chats.db") as store,
        ChatlayersCheckpointer(store) as saver,
    ):
        graph = node_graph(trim, saver)
        await graph.ainvoke({"messages": [HumanMessage("hi", id="h0")]}, CONFIG)
        assert [m.id for m in await store.fetch(KEY)] == ["h0", "re-h0"]


# --- LangGraph's checkpointer conformance suite ------------------------------------------

STACKS = ["memory://", "sqlite://:memory:", "summarize?trigger_at=2&keep_last=1::scrub::memory://"]


@pytest.mark.anyio
@pytest.mark.parametrize("url", STACKS)
async def test_langgraph_checkpoint_conformance(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    conformance = pytest.importorskip("langgraph.checkpoint.conformance")
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "test-secret-0123456789abcdef")

    # (the conformance package ships no type hints)
    @conformance.checkpointer_test(name=f"ChatlayersCheckpointer({url})")  # type: ignore[untyped-decorator]
    async def factory() -> Any:
        async with open_storage(url) as stack:
            yield ChatlayersCheckpointer(stack)

    report = await conformance.validate(factory)
    failures = {
        name: [str(f) for f in result.failures]
        for name, result in report.results.items()
        if result.passed is False
    }
    assert not failures
    assert report.passed_all_base()
    assert sum(r.tests_passed for r in report.results.values()) >= 58
