"""``coherence="process"``: an erasure made through another process reaches a pinned worker
within ``process_recheck`` seconds of the layer's clock (two processes, real stores)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from storage.testing import FakeClock

pytestmark = pytest.mark.anyio

KEY = ChatKey("erased-user", "session", "agent")

# Runs in the other process: opens the URL and erases (or replaces) through it.
_OTHER = """
import json, sys
import anyio
from storage import ChatKey, ChatMessage, open_storage

async def main(spec):
    key = ChatKey(*spec["key"])
    async with open_storage(spec["url"]) as store:
        if spec["op"] == "delete_user":
            await store.delete_user(key.user_id)
        elif spec["op"] == "delete":
            await store.delete(key)
        else:
            await store.replace(key, [ChatMessage("user", "a new start")])

anyio.run(main, json.loads(sys.argv[1]))
"""


async def _in_other_process(url: str, op: str) -> None:
    spec = json.dumps({"url": url, "key": [KEY.user_id, KEY.session_id, KEY.agent_id], "op": op})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    await anyio.run_process([sys.executable, "-c", _OTHER, spec], env=env, check=True)


def _history() -> list[ChatMessage]:
    out = []
    for n in range(5):
        out.append(ChatMessage("user", f"question {n} with a secret"))
        out.append(ChatMessage("assistant", f"answer {n}"))
    return out


@pytest.mark.parametrize("op", ["delete_user", "delete", "replace"])
@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_another_process_erasure_stops_a_pinned_worker_within_the_bound(
    tmp_path: Path, kind: str, op: str
) -> None:
    if kind == "sqlite":
        base: SQLiteChatStorage | JsonlChatStorage = SQLiteChatStorage(tmp_path / "c.db")
        url = f"sqlite:///{tmp_path / 'c.db'}"
    else:
        base = JsonlChatStorage(tmp_path / "j")
        url = f"jsonl://{tmp_path / 'j'}"
    clock = FakeClock(0.0)
    # The default bound: one second of the layer's clock.
    pinned = SummarizingChatStorage(
        base, trigger_at=2, keep_last=1, coherence="process", clock=clock
    )
    async with pinned:
        await pinned.save_messages(KEY, _history())
        view = await pinned.fetch(KEY)
        assert view[0].is_summary  # cached, summarized
        await _in_other_process(url, op)
        clock.advance(1.0)  # the bound has passed
        after = await pinned.fetch(KEY)
        if op == "replace":
            assert [m.text for m in after] == ["a new start"]
        else:
            assert after == []
            assert await pinned.fetch(KEY, limit=2) == []
        assert [m.text for m in await base.fetch(KEY)] == [m.text for m in after]


async def test_no_head_read_within_the_bound(tmp_path: Path) -> None:
    reads = 0

    class Counting(SQLiteChatStorage):
        async def head(self, key: ChatKey):  # type: ignore[no-untyped-def]
            nonlocal reads
            reads += 1
            return await super().head(key)

    clock = FakeClock(0.0)
    store = Counting(tmp_path / "c.db")
    pinned = SummarizingChatStorage(
        store, trigger_at=2, keep_last=1, coherence="process", process_recheck=5.0, clock=clock
    )
    async with pinned:
        await pinned.save_messages(KEY, _history())
        await pinned.fetch(KEY)
        before = reads
        for _ in range(10):
            clock.advance(0.4)
            await pinned.fetch(KEY)
        assert reads == before  # 4 s < 5 s: served from memory alone
        clock.advance(1.0)
        await pinned.fetch(KEY)
        assert reads == before + 1
    with pytest.raises(ValueError, match="process_recheck"):
        SummarizingChatStorage(store, coherence="process", process_recheck=0)
