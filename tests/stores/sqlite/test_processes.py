"""SQLite store across processes: concurrent turns, leases and checkpoints, approvals.

- Two processes saving 4-message turns to one key at the same moment: each turn is
  contiguous in ``fetch`` order, every time, and per-key order is commit order: a reader
  tailing by sequence number while they write never misses a row.
- Three processes racing for one lease and one checkpoint compare-and-set: exactly one
  wins each, and every process reads the winner's checkpoint.
- A tool approval recorded in one process is found by a new one, which resumes the
  pending call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage.abilities import SummaryCheckpoint
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage
from tests.paths import REPO

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "shared")
TURNS = 100

WORKER = r"""
import json, os, sys
from datetime import datetime, timezone
import anyio
from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.sqlite import SQLiteChatStorage

path, proc, mode, go, out, turns = sys.argv[1:7]
KEY = ChatKey("u", "s", "shared")
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)  # equal timestamps: order is the store's

async def main():
    store = SQLiteChatStorage(path, busy_timeout=30)
    await store.head(KEY)  # open and migrate before the start line
    while not os.path.exists(go):  # start together, to contend
        await anyio.sleep(0.001)
    result = {}
    if mode == "turns":
        for t in range(int(turns)):
            turn = [
                ChatMessage("user" if i == 0 else "assistant", f"p{proc}-t{t}-m{i}", created_at=T0)
                for i in range(4)
            ]
            assert len(await store.save_messages(KEY, turn)) == 4
    elif mode == "approve":  # an assistant asks for a tool; the user approves it
        call = ToolCall("call-7", "refund", '{"amount": 30}')
        await store.save_messages(KEY, [
            ChatMessage("user", "refund me", created_at=T0),
            ChatMessage("assistant", None, tool_calls=(call,), created_at=T0),
        ])
        data = {"tool_call_id": call.id, "decision": "approved"}
        stored = await store.save_record(KEY, ConversationRecord("tool_approval", data))
        result["seq"] = stored.seq
    else:  # "race": one lease, one compare-and-set, among all processes
        result["lease"] = await store.acquire_lease(KEY, f"p{proc}", 600)
        head = await store.head(KEY)
        summary = ChatMessage("system", f"by p{proc}", metadata={"chatlayers": {"summary": True}})
        cp = SummaryCheckpoint((summary,), head.last_seq, head.epoch, f"p{proc}", T0)
        won = await store.save_checkpoint(KEY, cp, expected_version=0)
        result["checkpoint"] = won is not None
        result["head"] = [head.last_seq, head.epoch]
    await store.aclose()
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f)

anyio.run(main, backend="trio" if int(proc) % 2 else "asyncio")
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the checks run here; the workers run on asyncio and trio


def start(tmp: Path, mode: str, count: int) -> tuple[list[subprocess.Popen[bytes]], Path]:
    go = tmp / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def tail(p: int) -> list[str]:
        return [str(tmp / f"out{p}.json"), str(TURNS)]

    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                str(tmp / "chats.db"),
                str(p),
                mode,
                str(go),
                str(tmp / f"out{p}.json"),
                str(TURNS),
            ],
            cwd=REPO,
            env=env,
        )
        for p in range(count)
    ]
    return procs, go


def results(tmp: Path, procs: list[subprocess.Popen[bytes]]) -> list[dict[str, Any]]:
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    return [json.loads((tmp / f"out{p}.json").read_text()) for p in range(len(procs))]


async def test_concurrent_turns_stay_contiguous_and_tails_miss_nothing(tmp_path: Path) -> None:
    async with SQLiteChatStorage(tmp_path / "chats.db") as store:
        await store.head(KEY)  # create the schema once
        procs, go = start(tmp_path, "turns", 2)
        go.touch()
        tailed: list[tuple[int, str]] = []
        after = 0
        total = 2 * TURNS * 4
        while len(tailed) < total:  # a reader tailing by sequence while both write
            tail = await store.fetch_since(KEY, after)
            tailed += [(s, str(m.content)) for s, m in zip(tail.seqs, tail.messages, strict=True)]
            after = tail.seqs[-1] if tail.seqs else after
            await anyio.lowlevel.checkpoint()
            assert all(p.poll() in (None, 0) for p in procs)
        results(tmp_path, procs)
        fetched = [str(m.content) for m in await store.fetch(KEY)]
    assert [text for _, text in tailed] == fetched  # nothing skipped, nothing repeated
    assert [s for s, _ in tailed] == sorted({s for s, _ in tailed})
    assert len(fetched) == total
    for start_at in range(0, total, 4):
        turn = fetched[start_at : start_at + 4]
        prefix = turn[0].rsplit("-", 1)[0]
        assert turn == [f"{prefix}-m{i}" for i in range(4)], turn
    for p in range(2):  # and each process's turns in its own order
        mine = [t for t in fetched[::4] if t.startswith(f"p{p}-")]
        assert mine == [f"p{p}-t{t}-m0" for t in range(TURNS)]


async def test_one_lease_and_one_checkpoint_win_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    async with SQLiteChatStorage(path) as store:
        await store.save_messages(KEY, [ChatMessage("user", "q"), ChatMessage("assistant", "a")])
        head = await store.head(KEY)
        procs, go = start(tmp_path, "race", 3)
        go.touch()
        outcome = results(tmp_path, procs)
        assert sum(r["lease"] for r in outcome) == 1
        assert sum(r["checkpoint"] for r in outcome) == 1
        assert all(r["head"] == [head.last_seq, head.epoch] for r in outcome)
        winner = next(p for p, r in enumerate(outcome) if r["checkpoint"])
        loaded = await store.load_checkpoint(KEY)
        assert isinstance(loaded, SummaryCheckpoint)
        assert loaded.version == 1
        assert loaded.messages[0].content == f"by p{winner}"
        holder = next(p for p, r in enumerate(outcome) if r["lease"])
        assert not await store.acquire_lease(KEY, "parent", 10)
        await store.release_lease(KEY, f"p{holder}")
        assert await store.acquire_lease(KEY, "parent", 10)


async def test_an_approval_saved_in_one_process_resumes_the_call_in_another(tmp_path: Path) -> None:
    procs, go = start(tmp_path, "approve", 1)
    go.touch()
    (outcome,) = results(tmp_path, procs)
    async with SQLiteChatStorage(tmp_path / "chats.db") as store:  # a new process's view
        history = await store.fetch(KEY)
        answered = {m.tool_call_id for m in history if m.role == "tool"}
        pending = [c for m in history for c in m.tool_calls if c.id not in answered]
        approvals = await store.fetch_records(KEY, kind="tool_approval")
        assert [c.id for c in pending] == ["call-7"]
        assert [(r.data["tool_call_id"], r.data["decision"], r.seq) for r in approvals] == [
            ("call-7", "approved", outcome["seq"])
        ]
        # The record never reaches the model's history; the call resumes with its result.
        assert all(m.role != "tool" for m in history)
        await store.save(KEY, ChatMessage("tool", "refunded", tool_call_id=pending[0].id))
        assert [m.role for m in await store.fetch(KEY)] == ["user", "assistant", "tool"]
        assert (await store.head(KEY)).last_seq > approvals[0].seq
