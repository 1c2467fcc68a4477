"""ChatlayersCheckpointer's pending writes: an agent interrupted mid-step with a persistent
inner saver leaves no PII in it (its messages, ``Send`` tool calls, interrupt values and input
are stack records, through the scrubbing layer), resumes in a new process, and erasing the
thread or the user erases those records."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO

pytest.importorskip("langgraph")
pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Overwrite, Send, interrupt

from storage.abilities import RecordStorage, find_ability
from storage.adapters.langgraph import ChatlayersCheckpointer
from storage.adapters.langgraph_writes import WRITES_KIND, is_ref
from storage.config import open_storage
from storage.errors import ConfigError
from storage.message import ChatKey
from storage.protocol import ChatStorageWrapper
from storage.stores.memory import InMemoryChatStorage
from storage.sync import SyncChatStorage
from tests.adapters.test_langgraph import ScriptedModel

SECRET = "test-secret-0123456789abcdef"
EMAIL = "ada@example.com"
CARD = "4111 1111 1111 1111"
CONFIG: Any = {"configurable": {"thread_id": "thread-1", "user_id": "user-1"}}
KEY = ChatKey("user-1", "thread-1", "agent")


class FileSaver(InMemorySaver):
    """A persistent saver: ``InMemorySaver``'s data (the bytes of LangGraph's serde, as a
    ``SqliteSaver`` writes them) kept in one file, loaded by a new instance."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        if path.exists():
            storage, writes, blobs = pickle.loads(path.read_bytes())
            for thread_id, spaces in storage.items():
                for ns, checkpoints in spaces.items():
                    self.storage[thread_id][ns].update(checkpoints)
            self.writes.update(writes)
            self.blobs.update(blobs)

    def _dump(self) -> None:
        storage = {t: {ns: dict(c) for ns, c in s.items()} for t, s in self.storage.items()}
        writes = {k: dict(v) for k, v in self.writes.items()}
        self.path.write_bytes(pickle.dumps((storage, writes, dict(self.blobs))))

    def put(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        config = super().put(*args, **kwargs)
        self._dump()
        return config

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        super().put_writes(*args, **kwargs)
        self._dump()

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)
        self._dump()


def make_tools(charge_runs: bool = True) -> list[Any]:
    @tool
    def charge(email: str) -> str:
        """Charge the customer's card."""
        if not charge_runs:
            raise AssertionError("charge ran again: its result was a pending write")
        return f"Charged card {CARD} for {email}."

    @tool
    def confirm(summary: str) -> str:
        """Ask the user to confirm the order."""
        return f"user said {interrupt(f'Confirm {summary}?')}"

    return [charge, confirm]


def script(resumed: bool) -> Iterator[AIMessage]:
    if resumed:
        yield AIMessage("Done.", id="ai-2")
        return
    calls = [
        {"name": "charge", "args": {"email": EMAIL}, "id": "call-1"},
        {"name": "confirm", "args": {"summary": "one order"}, "id": "call-2"},
    ]
    yield AIMessage("", id="ai-1", tool_calls=calls)


def make_agent(checkpointer: Any, resumed: bool = False) -> Any:
    """The agent; ``resumed``: the process that resumes the run (its charge tool must not
    run again, its model gives the final answer)."""
    model = ScriptedModel(messages=script(resumed))
    return create_agent(model, make_tools(not resumed), checkpointer=checkpointer)


def leaks(path: Path) -> list[str]:
    """The raw PII values found in the bytes of ``path`` (and its SQLite side files)."""
    found = []
    for file in path.parent.glob(f"{path.name}*"):
        data = file.read_bytes()
        for value in (EMAIL, CARD, CARD.replace(" ", "")):
            if value.encode() in data:
                found.append(f"{value} in {file.name}")
    return found


RESUME = """
import json, os, sys
from pathlib import Path
from langgraph.types import Command
from storage.adapters.langgraph import ChatlayersCheckpointer
from storage.config import open_storage
from storage.sync import SyncChatStorage
from tests.adapters.test_langgraph_writes import CONFIG, FileSaver, make_agent

db, saved = sys.argv[1], Path(sys.argv[2])
with SyncChatStorage(open_storage(f"scrub::sqlite:///{db}")) as chats:
    agent = make_agent(ChatlayersCheckpointer(chats, inner=FileSaver(saved)), resumed=True)
    agent.invoke(Command(resume="yes"), CONFIG)
    messages = agent.get_state(CONFIG).values["messages"]
    print(json.dumps([[m.type, m.content] for m in messages]))
"""


def test_an_interrupted_agent_leaves_no_pii_in_the_inner_saver_and_resumes_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", SECRET)
    db, saved = tmp_path / "chats.db", tmp_path / "checkpoints.pickle"
    with SyncChatStorage(open_storage(f"scrub::sqlite:///{db}")) as chats:
        agent = make_agent(ChatlayersCheckpointer(chats, inner=FileSaver(saved)))
        question = HumanMessage(f"I am {EMAIL}, buy one order", id="h1")
        result = agent.invoke({"messages": [question]}, CONFIG)
        assert [i.value for i in result["__interrupt__"]] == ["Confirm one order?"]
        # The charge tool finished in the interrupted step: its result is a pending write,
        # read back scrubbed.
        results = [t.result for t in agent.get_state(CONFIG).tasks if t.result]
        assert [m.content[:26] for r in results for m in r["messages"]] == [
            "Charged card <CREDIT_CARD_"
        ]
    # The saver's file holds a reference in its place.
    kept = FileSaver(saved).get_tuple(CONFIG)
    assert kept is not None
    refs = [v for _, c, v in kept.pending_writes or [] if c == "messages"]
    assert refs
    assert all(is_ref(v) for v in refs)
    assert leaks(saved) == []
    assert leaks(db) == []
    # Another process resumes the run from the saver's file and the stack's database.
    done = subprocess.run(
        [sys.executable, "-c", RESUME, str(db), str(saved)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
        env={**os.environ, "CHATLAYERS_PII_SECRET": SECRET},
    )
    assert done.returncode == 0, done.stderr
    messages = json.loads(done.stdout.strip().splitlines()[-1])
    assert [t for t, _ in messages] == ["human", "ai", "tool", "tool", "ai"]
    charged, confirmed = messages[2][1], messages[3][1]
    assert charged.startswith("Charged card <CREDIT_CARD_")
    assert "<EMAIL_ADDRESS_" in charged
    assert confirmed == "user said yes"
    assert messages[4][1] == "Done."
    assert leaks(saved) == []
    assert leaks(db) == []


def history(agent: Any) -> list[Any]:
    """Each checkpoint's next nodes and its tasks' results and interrupts (the pending
    writes), tool results' random ids left out."""

    def result(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return [(m.type, m.content, getattr(m, "tool_call_id", None)) for m in value["messages"]]

    return [
        (s.next, [(t.name, result(t.result), [i.value for i in t.interrupts]) for t in s.tasks])
        for s in agent.get_state_history(CONFIG)
    ]


def test_state_history_of_an_interrupted_run_as_in_memory_saver(tmp_path: Path) -> None:
    native = make_agent(InMemorySaver())
    with SyncChatStorage(InMemoryChatStorage()) as chats:
        ours = make_agent(ChatlayersCheckpointer(chats, inner=FileSaver(tmp_path / "s")))
        for agent in (native, ours):
            agent.invoke({"messages": [HumanMessage(f"I am {EMAIL}", id="h1")]}, CONFIG)
        expected = history(native)
        assert any(r for _, tasks in expected for _, r, _ in tasks)  # writes are pending
        assert history(ours) == expected


async def a_checkpoint(saver: ChatlayersCheckpointer) -> Any:
    """The config of a new empty checkpoint of the thread, as LangGraph passes it to
    ``put_writes`` (the run's ``configurable``, with the checkpoint's id)."""
    thread = {**CONFIG["configurable"], "checkpoint_ns": ""}
    saved = await saver.aput({"configurable": thread}, empty_checkpoint(), {}, {})
    return {"configurable": {**thread, "checkpoint_id": saved["configurable"]["checkpoint_id"]}}


SHAPES: list[Any] = [
    AIMessage(f"mail {EMAIL}", id="ai-1"),
    [HumanMessage("hi", id="h1"), RemoveMessage(id="h0")],
    Overwrite([AIMessage("over", id="ai-2")]),
    {"role": "user", "content": f"I am {EMAIL}"},
    ("user", "a tuple"),
    "plain text",
]


@pytest.mark.anyio
async def test_every_shape_of_a_messages_write_reads_back_as_written(tmp_path: Path) -> None:
    stack = InMemoryChatStorage()
    inner = FileSaver(tmp_path / "saved.pickle")
    saver = ChatlayersCheckpointer(stack, inner=inner)
    config = await a_checkpoint(saver)
    send = Send("tools", [{"name": "charge", "args": {"email": EMAIL}, "id": "c1"}])
    writes = [("messages", v) for v in SHAPES]
    writes += [("__pregel_tasks", send), ("other", {"email": EMAIL}), ("messages", 7)]
    await saver.aput_writes(config, writes, "task-1")
    tup = await saver.aget_tuple(config)
    assert tup is not None
    assert [(c, v) for _, c, v in tup.pending_writes or []] == writes
    # The inner saver holds references for the conversation's values, the rest as given.
    kept = await inner.aget_tuple(config)
    assert kept is not None
    inner_values = [v for _, _, v in kept.pending_writes or []]
    assert all(isinstance(v, dict) and len(v) == 2 for v in inner_values[: len(SHAPES) + 1])
    assert inner_values[len(SHAPES) + 1 :] == [{"email": EMAIL}, 7]
    records = await stack.fetch_records(KEY, kind=WRITES_KIND)
    assert len(records) == 1
    # A retried call stores no second record.
    await saver.aput_writes(config, writes, "task-1")
    assert len(await stack.fetch_records(KEY, kind=WRITES_KIND)) == 1


@pytest.mark.anyio
async def test_scrubbed_pending_writes_read_back_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", SECRET)
    async with open_storage("scrub::memory://") as stack:
        saver = ChatlayersCheckpointer(stack)
        config = await a_checkpoint(saver)
        result = ToolMessage(f"card {CARD}", tool_call_id="c1", id="t1")
        await saver.aput_writes(config, [("messages", [result])], "task-1")
        tup = await saver.aget_tuple(config)
        assert tup is not None
        assert tup.pending_writes
        (_, channel, (back,)) = tup.pending_writes[0]
        assert channel == "messages"
        assert back.tool_call_id == "c1"
        assert back.id == "t1"
        assert back.content.startswith("card <CREDIT_CARD_")


@pytest.mark.anyio
async def test_erasing_the_thread_or_the_user_erases_its_pending_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stack = InMemoryChatStorage()
    records = find_ability(stack, RecordStorage)
    assert records is not None
    saver = ChatlayersCheckpointer(stack, user_id="user-1", inner=FileSaver(tmp_path / "s"))
    config = await a_checkpoint(saver)
    await saver.aput_writes(config, [("messages", SHAPES[0])], "task-1")
    assert await records.fetch_records(KEY, kind=WRITES_KIND)
    await saver.adelete_thread("thread-1")
    assert await records.fetch_records(KEY, kind=WRITES_KIND) == []
    # delete_user: the inner saver still holds the reference; the write is left out.
    config = await a_checkpoint(saver)
    await saver.aput_writes(config, [("messages", SHAPES[0]), ("other", 1)], "task-2")
    await stack.delete_user("user-1")
    assert await records.fetch_records(KEY, kind=WRITES_KIND) == []
    with caplog.at_level(logging.WARNING, logger="storage.adapters.langgraph_writes"):
        tup = await saver.aget_tuple(config)
    assert tup is not None
    assert [(c, v) for _, c, v in tup.pending_writes or []] == [("other", 1)]
    assert "cannot be read" in caplog.text


class NoRecords(ChatStorageWrapper):
    """A third-party layer that declares no abilities (it hides records)."""


def test_a_stack_without_records_is_refused_with_a_persistent_inner_saver(
    tmp_path: Path,
) -> None:
    stack = NoRecords(InMemoryChatStorage())
    with pytest.raises(ConfigError, match="keeps no records"):
        ChatlayersCheckpointer(stack, inner=FileSaver(tmp_path / "s"))
    ChatlayersCheckpointer(stack)  # in memory: nothing reaches a disk


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # LangGraph runs on asyncio
