"""OpenAIAgentsSession as the SDK's users use ``SQLiteSession``: one session serving
``Runner.run_sync`` from a thread pool (each thread its own event loop), two workers over one
SQLite file, ``pop_item`` racing another worker's append, ``close()``, and
``session_settings`` given as a dict next to a ``RunConfig``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import pytest

from tests.paths import REPO

pytest.importorskip("agents")

from agents import RunConfig, Runner
from agents.memory.session_settings import SessionSettings

from storage.adapters.openai_agents import OpenAIAgentsSession
from storage.errors import StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from storage.sync import SyncChatStorage
from tests.adapters.racing import AppendsAfterRead
from tests.adapters.test_openai_agents import ScriptedModel, text_message, weather_agent

KEY = ChatKey("user-1", "session-1", "assistant")

THREAD_POOL = textwrap.dedent(
    """
    import concurrent.futures, json, os, sys
    from agents import Runner
    from storage.adapters.openai_agents import OpenAIAgentsSession
    from storage.config import open_storage
    from storage.message import ChatKey
    from storage.sync import SyncChatStorage
    from tests.adapters.test_openai_agents import (
        NO_TRACING, ScriptedModel, text_message, weather_agent,
    )

    urls, portal, runs = sys.argv[1].split(" "), sys.argv[2] == "portal", int(sys.argv[3])
    key = ChatKey("user-1", "session-1", "assistant")
    stacks = [open_storage(url) for url in urls]
    # One session per worker (per stack instance), each shared by every thread of the pool.
    wrapped = [SyncChatStorage(s) if portal else s for s in stacks]
    sessions = [OpenAIAgentsSession(s, key) for s in wrapped]

    def run(n):
        model = ScriptedModel([[text_message(f"answer {n}", id=f"msg_{n}")]])
        session = sessions[n % len(sessions)]
        result = Runner.run_sync(weather_agent(model), f"q{n}", session=session,
                                 run_config=NO_TRACING)
        return result.final_output

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(run, range(runs)))
    check = SyncChatStorage(open_storage(urls[0]))
    stored = [m.text for m in check.fetch_all_chats("user-1", "session-1")
              for m in [m.message]]
    check.close()
    for stack in wrapped:
        stack.close() if portal else SyncChatStorage(stack).close()
    print(json.dumps({"answers": answers, "stored": stored}))
    """
)


def run_pool(urls: list[str], *, portal: bool, runs: int = 24) -> dict[str, Any]:
    mode = "portal" if portal else "direct"
    done = subprocess.run(
        [sys.executable, "-c", THREAD_POOL, " ".join(urls), mode, str(runs)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={
            **os.environ,
            "CHATLAYERS_PII_SECRET": "test-secret-0123456789abcdef",
        },
        # A deadlock fails the test instead of hanging the suite.
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_one_session_serves_run_sync_from_a_thread_pool(tmp_path: Path) -> None:
    result = run_pool([f"sqlite:///{tmp_path / 'chats.db'}"], portal=False)
    assert result["answers"] == [f"answer {n}" for n in range(24)]
    stored = result["stored"]
    assert len(stored) == 48
    assert sorted(t for t in stored if t.startswith("q")) == sorted(f"q{n}" for n in range(24))


def test_two_workers_over_one_sqlite_file_from_thread_pools(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    result = run_pool([url, url], portal=False)
    assert len(result["stored"]) == 48
    assert sorted(t for t in result["stored"] if t.startswith("answer")) == sorted(
        f"answer {n}" for n in range(24)
    )


def test_a_layered_stack_through_a_portal_from_a_thread_pool(tmp_path: Path) -> None:
    url = f"scrub::sqlite:///{tmp_path / 'chats.db'}"
    result = run_pool([url], portal=True)
    assert result["answers"] == [f"answer {n}" for n in range(24)]
    assert len(result["stored"]) == 48


@pytest.mark.anyio
async def test_pop_item_never_erases_an_item_appended_meanwhile(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    two = OpenAIAgentsSession(SQLiteChatStorage(db), KEY)

    async def append() -> None:
        await two.add_items([{"role": "user", "content": "late"}])

    racing = AppendsAfterRead(SQLiteChatStorage(db), append, times=0)
    one = OpenAIAgentsSession(racing, KEY)
    await one.add_items([{"role": "user", "content": f"m{n}"} for n in range(3)])
    racing.times = 1
    assert await one.pop_item() == {"role": "user", "content": "m2"}
    assert [cast("dict[str, Any]", i)["content"] for i in await two.get_items()] == [
        "m0",
        "m1",
        "late",
    ]


@pytest.mark.anyio
async def test_two_workers_popping_at_once_pop_two_items(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    two = OpenAIAgentsSession(SQLiteChatStorage(db), KEY)
    popped_by_two: list[Any] = []

    async def pop() -> None:
        popped_by_two.append(await two.pop_item())

    racing = AppendsAfterRead(SQLiteChatStorage(db), pop, times=0)
    one = OpenAIAgentsSession(racing, KEY)
    await one.add_items([{"role": "user", "content": f"m{n}"} for n in range(4)])
    racing.times = 1  # the other worker pops right after this one read the record
    popped_by_one = await one.pop_item()
    assert popped_by_two == [{"role": "user", "content": "m3"}]
    assert popped_by_one == {"role": "user", "content": "m2"}  # not m3 a second time
    assert [cast("dict[str, Any]", i)["content"] for i in await two.get_items()] == ["m0", "m1"]


@pytest.mark.anyio
async def test_a_pop_meanwhile_of_part_of_a_step_is_not_popped_again(tmp_path: Path) -> None:
    db = tmp_path / "chats.db"
    two = OpenAIAgentsSession(SQLiteChatStorage(db), KEY)
    step: list[Any] = [
        {"role": "assistant", "content": "calling"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
    ]

    async def pop() -> None:
        await two.pop_item()

    racing = AppendsAfterRead(SQLiteChatStorage(db), pop, times=0)
    one = OpenAIAgentsSession(racing, KEY)
    await one.add_items([{"role": "user", "content": "go"}, *step])  # step: one message
    racing.times = 1
    assert await one.pop_item() == step[1]  # the other worker took c2
    assert await two.get_items() == [{"role": "user", "content": "go"}, step[0]]


# --- close() -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_close_ends_the_session() -> None:
    store = InMemoryChatStorage()
    session = OpenAIAgentsSession(store, KEY)
    await session.add_items([{"role": "user", "content": "hi"}])
    session.close()
    session.close()  # idempotent
    with pytest.raises(StorageUnavailableError):
        await session.get_items()
    with pytest.raises(StorageUnavailableError):
        await session.add_items([{"role": "user", "content": "again"}])
    # The stack is the caller's: still open, still holding the item.
    assert [m.text for m in await store.fetch(KEY)] == ["hi"]


def test_close_with_close_stack_closes_the_portal() -> None:
    sync = SyncChatStorage(InMemoryChatStorage())
    session = OpenAIAgentsSession(sync, KEY, close_stack=True)
    sync.save(KEY, ChatMessage("user", "hi"))
    session.close()
    assert sync.closed


# --- session_settings as a dict, with a RunConfig ----------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's Runner is asyncio-only
@pytest.mark.anyio
async def test_session_settings_dict_works_with_run_config() -> None:
    session = OpenAIAgentsSession(InMemoryChatStorage(), KEY, session_settings={"limit": 2})
    assert session.session_settings == SessionSettings(limit=2)
    await session.add_items([{"role": "user", "content": f"old {n}"} for n in range(6)])
    model = ScriptedModel([[text_message("ok", id="msg_1")], [text_message("ok", id="msg_2")]])
    agent = weather_agent(model)
    await Runner.run(agent, "now", session=session, run_config=RunConfig(tracing_disabled=True))
    # The session's own limit: the two newest stored items, then the new input.
    assert [i["content"] for i in model.inputs[0]] == ["old 4", "old 5", "now"]
    config = RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=1))
    await Runner.run(agent, "later", session=session, run_config=config)
    assert [i.get("content") for i in model.inputs[1]][-1] == "later"
    assert len(model.inputs[1]) == 2
