"""SyncChatStorage: the protocol's methods without an event loop, from many threads at once."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from storage.errors import InvalidMessageError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.protocol import ChatStorageWrapper
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from storage.sync import SyncChatStorage

KEY = ChatKey("user-1", "session-1", "agent")


def portal_threads() -> int:
    return sum(t.name == "chatlayers-sync-portal" for t in threading.enumerate())


class ClosingProbe(ChatStorageWrapper):
    """Records whether aclose reached the stack and on which thread each call ran."""

    def __init__(self) -> None:
        super().__init__(InMemoryChatStorage())
        self.closed = False
        self.threads: set[str] = set()

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        self.threads.add(threading.current_thread().name)
        return await super().save(key, message)

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        self.threads.add(threading.current_thread().name)
        return await super().save_messages(key, messages)

    async def aclose(self) -> None:
        self.closed = True
        await super().aclose()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_every_method_blocks_and_returns_what_the_stack_returns(
    tmp_path: Path, backend: str
) -> None:
    with SyncChatStorage(SQLiteChatStorage(tmp_path / "chats.db"), backend=backend) as chats:
        call = ChatMessage("assistant", None, [ToolCall("c1", "f", "{}")])
        hello = ChatMessage("user", "hello")
        (saved,) = chats.save(KEY, hello)
        assert (saved.id, saved.content) == (hello.id, "hello")
        assert saved.created_at is not None  # set by the store, on the portal's loop
        assert chats.fetch(KEY) == [saved]
        assert chats.save(KEY, hello) == []  # a retried id is a no-op
        stored = chats.save_messages(KEY, [call, ChatMessage("tool", "r", tool_call_id="c1")])
        assert [m.id for m in stored] == [call.id, stored[1].id]
        assert [m.role for m in chats.fetch(KEY)] == ["user", "assistant", "tool"]
        assert [m.role for m in chats.fetch(KEY, limit=1)] == []  # never a lone tool result
        other = ChatKey("user-1", "session-1", "other")
        chats.save(other, ChatMessage("user", "elsewhere"))
        merged = chats.fetch_all_chats("user-1", "session-1")
        assert [(e.agent_id, e.message.role) for e in merged] == [
            ("agent", "user"),
            ("agent", "assistant"),
            ("agent", "tool"),
            ("other", "user"),
        ]
        chats.delete(KEY)
        assert chats.fetch(KEY) == []
        assert len(chats.fetch(other)) == 1
        chats.delete_user("user-1")
        assert chats.fetch(other) == []


def test_errors_propagate_unchanged_and_nothing_is_stored() -> None:
    with SyncChatStorage(InMemoryChatStorage()) as chats:
        with pytest.raises(InvalidMessageError, match="unknown role"):
            chats.save_messages(KEY, [ChatMessage("user", "ok"), ChatMessage("robot", "no")])
        assert chats.fetch(KEY) == []
        with pytest.raises(ValueError, match="limit"):
            chats.fetch(KEY, limit=-1)


def test_many_threads_share_one_portal(tmp_path: Path) -> None:
    before = portal_threads()
    threads, per_thread = 8, 25
    with SyncChatStorage(SQLiteChatStorage(tmp_path / "chats.db")) as chats:

        def work(n: int) -> list[str]:
            own = ChatKey("user-1", "session-1", f"agent-{n}")
            ids = []
            for i in range(per_thread):
                message = ChatMessage("user", f"thread {n} message {i}")
                chats.save(own, message)
                chats.save(KEY, ChatMessage("user", f"shared {n}/{i}"))
                ids.append(message.id)
                assert chats.fetch(own, limit=1)[0].id == message.id
            return ids

        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(work, range(threads)))
        assert portal_threads() == before + 1
        for n, ids in enumerate(results):
            own = ChatKey("user-1", "session-1", f"agent-{n}")
            assert [m.id for m in chats.fetch(own)] == ids  # each thread's order kept
        assert len(chats.fetch(KEY)) == threads * per_thread
        assert len(chats.fetch_all_chats("user-1", "session-1")) == 2 * threads * per_thread
    assert portal_threads() == before


def test_portal_starts_lazily_and_close_is_final() -> None:
    before = portal_threads()
    probe = ClosingProbe()
    chats = SyncChatStorage(probe)
    assert portal_threads() == before
    assert "idle" in repr(chats)
    chats.save(KEY, ChatMessage("user", "hi"))
    assert probe.threads == {"chatlayers-sync-portal"}  # the stack ran on the portal thread
    assert portal_threads() == before + 1
    chats.close()
    chats.close()  # idempotent
    assert probe.closed
    assert chats.closed
    assert portal_threads() == before
    with pytest.raises(StorageUnavailableError, match="closed"):
        chats.fetch(KEY)


def test_close_without_use_still_closes_the_stack_and_close_stack_false_keeps_it() -> None:
    probe = ClosingProbe()
    SyncChatStorage(probe).close()
    assert probe.closed
    kept = ClosingProbe()
    with SyncChatStorage(kept, close_stack=False) as chats:
        chats.save(KEY, ChatMessage("user", "hi"))
    assert not kept.closed


def test_close_called_on_the_portal_thread_is_handed_off() -> None:
    before = portal_threads()
    probe = ClosingProbe()
    chats = SyncChatStorage(probe)

    async def close_from_inside() -> None:
        chats.close()  # e.g. a finalizer the garbage collector runs on the portal thread

    chats.call(close_from_inside)
    for thread in threading.enumerate():
        if thread.name == "chatlayers-sync-close":
            thread.join()
    assert chats.closed
    assert probe.closed
    assert portal_threads() == before


def test_a_script_that_never_closes_the_facade_still_exits(tmp_path: Path) -> None:
    """The portal is a non-daemon thread: without the exit hook the interpreter waits forever."""
    import subprocess
    import sys

    db = tmp_path / "chats.db"
    script = (
        "from storage.message import ChatKey, ChatMessage\n"
        "from storage.stores.sqlite import SQLiteChatStorage\n"
        "from storage.sync import SyncChatStorage\n"
        f"chats = SyncChatStorage(SQLiteChatStorage({str(db)!r}))\n"
        "key = ChatKey('u', 's', 'a')\n"
        "chats.save(key, ChatMessage('user', 'hello'))\n"
        "print(len(chats.fetch(key)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    # The exit hook closed the stack too: the row is durable and readable by a new process.
    import sqlite3

    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (1,)
