"""JSONL store: several processes appending to one key and to one session."""

from __future__ import annotations

import bisect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from storage.message import ChatKey
from storage.stores.jsonl import JsonlChatStorage
from tests.paths import REPO

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the checks run here; the workers themselves run on asyncio and trio


PROCESSES = 4
APPENDS = 500

# Runs with LC_ALL=C and PYTHONUTF8=0: files must be UTF-8 whatever the platform default.
WORKER = r"""
import json, os, sys, time
from datetime import datetime, timezone
import anyio
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage

root, proc, mode, out, go, count = sys.argv[1:7]
proc, count = int(proc), int(count)
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)  # equal timestamps: order is the save order

async def main():
    store = JsonlChatStorage(root, fsync="never")
    while not os.path.exists(go):  # start together, to contend
        await anyio.sleep(0.001)
    log = []
    for i in range(count):
        if mode == "same":
            agent = "shared"
            message = ChatMessage("user", f"p{proc}-{i} \u00fcn\u00ef \U0001f600", created_at=T0)
        elif mode == "session":
            agent = f"agent-{(proc + i) % 4}"
            message = ChatMessage("user", f"p{proc}-{i} \u05e9\u05dc\u05d5\u05dd", created_at=T0)
        else:  # "retry": every process saves the same ids, in its own order
            agent = "shared"
            n = (i * (proc + 1)) % count
            message = ChatMessage("user", f"m{n}", id=f"id-{n}", created_at=T0)
        start = time.monotonic()
        stored = await store.save(ChatKey("u", "s", agent), message)
        end = time.monotonic()
        log.append([message.id, start, end, len(stored)])
    await store.aclose()
    with open(out, "w", encoding="utf-8") as f:
        json.dump(log, f)

anyio.run(main, backend="trio" if proc % 2 else "asyncio")
"""


def run_workers(tmp: Path, mode: str, count: int = APPENDS) -> list[list[list[Any]]]:
    root, go = tmp / "store", tmp / "go"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONUTF8"))}
    env |= {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, *map(str, (root, p, mode, tmp / f"log{p}", go, count))],
            cwd=REPO,
            env=env,
        )
        for p in range(PROCESSES)
    ]
    time.sleep(0.3)
    go.touch()
    for proc in procs:
        assert proc.wait(timeout=300) == 0
    return [json.loads((tmp / f"log{p}").read_text(encoding="utf-8")) for p in range(PROCESSES)]


def raw_lines(root: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted((root / "u" / "s").glob("*.jsonl")):
        data = path.read_bytes()
        assert data.endswith(b"\n")
        assert b" torn" not in data
        header, *lines = data.split(b"\n")[:-1]
        assert json.loads(header)["hdr"] == 1  # exactly one header, written by the creator
        for line in lines:
            record = json.loads(line.decode("utf-8"))  # every line whole: no torn or merged line
            assert line.startswith(b'{"seq":')
            records.append(record)
    return records


def check_save_order(logs: list[list[list[Any]]], merged_ids: list[str]) -> None:
    """A save that returned before another began comes first in the merged view."""
    position = {mid: n for n, mid in enumerate(merged_ids)}
    saves = sorted((end, position[mid]) for log in logs for mid, _, end, _ in log)
    ends = [end for end, _ in saves]
    prefix_max = []
    best = -1
    for _, pos in saves:
        best = max(best, pos)
        prefix_max.append(best)
    for log in logs:
        for mid, start, _, _ in log:
            before = bisect.bisect_left(ends, start)  # saves that ended before this one began
            if before:
                assert prefix_max[before - 1] < position[mid], mid


@pytest.mark.slow
async def test_four_processes_append_to_one_key(tmp_path: Path) -> None:
    logs = run_workers(tmp_path, "same")
    records = raw_lines(tmp_path / "store")
    assert len(records) == PROCESSES * APPENDS
    seqs = [r["seq"] for r in records]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    async with JsonlChatStorage(tmp_path / "store") as store:
        fetched = await store.fetch(ChatKey("u", "s", "shared"))
        assert [m.id for m in fetched] == [r["id"] for r in records]
        texts = [m.text for m in fetched]
        for p in range(PROCESSES):
            mine = [t for t in texts if t.startswith(f"p{p}-")]
            assert mine == [f"p{p}-{i} ünï 😀" for i in range(APPENDS)]
        merged = await store.fetch_all_chats("u", "s")
        assert [m.message for m in merged] == fetched
        check_save_order(logs, [m.id for m in fetched])
        assert [m.id for m in await store.fetch(ChatKey("u", "s", "shared"), limit=25)] == [
            m.id for m in fetched[-25:]
        ]


@pytest.mark.slow
async def test_four_processes_append_to_keys_of_one_session(tmp_path: Path) -> None:
    logs = run_workers(tmp_path, "session")
    records = raw_lines(tmp_path / "store")
    assert len(records) == PROCESSES * APPENDS
    assert len({r["seq"] for r in records}) == len(records)  # one sequence for the session
    async with JsonlChatStorage(tmp_path / "store") as store:
        merged = await store.fetch_all_chats("u", "s")
        assert len(merged) == PROCESSES * APPENDS
        assert len({m.message.id for m in merged}) == len(merged)
        for p in range(PROCESSES):
            mine = [
                (m.agent_id, m.message.text) for m in merged if m.message.text.startswith(f"p{p}-")
            ]
            assert mine == [(f"agent-{(p + i) % 4}", f"p{p}-{i} שלום") for i in range(APPENDS)]
        for agent in range(4):
            fetched = await store.fetch(ChatKey("u", "s", f"agent-{agent}"))
            assert fetched == [m.message for m in merged if m.agent_id == f"agent-{agent}"]
        check_save_order(logs, [m.message.id for m in merged])


@pytest.mark.slow
async def test_retries_from_other_processes_are_no_ops(tmp_path: Path) -> None:
    count = 200
    logs = run_workers(tmp_path, "retry", count)
    stored_by = [sum(entry[3] for entry in log) for log in logs]
    assert sum(stored_by) == count  # each id stored by exactly one process
    async with JsonlChatStorage(tmp_path / "store") as store:
        fetched = await store.fetch(ChatKey("u", "s", "shared"))
        assert sorted(m.id for m in fetched) == sorted(f"id-{n}" for n in range(count))
