"""JSONL store in production shapes: several processes on one directory (concurrent turns stay
contiguous, in commit order, and a tailing reader skips nothing; one lease and one checkpoint win
across processes), and kill -9 in the middle of writes to the new sidecars (checkpoints, leases,
records, rewrites)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage
from tests.paths import REPO

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the checks run here; the workers run on asyncio and trio


def spawn(code: str, *args: object) -> subprocess.Popen[bytes]:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=REPO, env=env)


# --- concurrent turns --------------------------------------------------------------------------

TURNS_WORKER = r"""
import json, os, sys, time
import anyio
from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage

root, proc, turns, go, out = sys.argv[1:6]
proc, turns = int(proc), int(turns)

async def main():
    store = JsonlChatStorage(root, fsync="never")
    open(out + ".ready", "w").close()
    while not os.path.exists(go):
        await anyio.sleep(0.0005)
    log = []
    for t in range(turns):
        roles = ["user", "assistant", "assistant", "assistant"]
        turn = [ChatMessage(roles[i], f"p{proc}-t{t}-{i}") for i in range(4)]
        start = time.monotonic()
        await store.save_messages(ChatKey("u", "s", "a"), turn)
        log.append([f"p{proc}-t{t}", start, time.monotonic()])
    await store.aclose()
    with open(out, "w") as f:
        json.dump(log, f)

anyio.run(main, backend="trio" if proc % 2 else "asyncio")
"""


async def test_two_processes_saving_turns_stay_contiguous_in_commit_order(tmp_path: Path) -> None:
    root, go, turns = tmp_path / "store", tmp_path / "go", 300
    procs = [spawn(TURNS_WORKER, root, p, turns, go, tmp_path / f"log{p}") for p in range(2)]
    store = JsonlChatStorage(root)
    tailed: list[tuple[int, str]] = []
    last = 0
    while not all((tmp_path / f"log{p}.ready").exists() for p in range(2)):
        assert all(p.poll() is None for p in procs)
        await anyio.sleep(0.01)  # waiting for the workers to be ready (not a pass/fail timing)
    go.touch()
    # A reader tailing by sequence while both write: it must never skip a turn committed late.
    while any(p.poll() is None for p in procs):
        tail = await store.fetch_since(KEY, last)
        tailed.extend(zip(tail.seqs, (m.text for m in tail.messages), strict=True))
        last = tail.head.last_seq if tail.seqs else last
    for p in procs:
        assert p.wait(timeout=120) == 0
    tail = await store.fetch_since(KEY, last)
    tailed.extend(zip(tail.seqs, (m.text for m in tail.messages), strict=True))
    fetched = [m.text for m in await store.fetch(KEY)]
    assert len(fetched) == 2 * turns * 4
    assert [text for _, text in tailed] == fetched  # nothing skipped, nothing twice
    assert [seq for seq, _ in tailed] == sorted({seq for seq, _ in tailed})
    for at in range(0, len(fetched), 4):  # every turn whole and in place
        name = fetched[at].rsplit("-", 1)[0]
        assert fetched[at : at + 4] == [f"{name}-{i}" for i in range(4)], at
    order = [fetched[at].rsplit("-", 1)[0] for at in range(0, len(fetched), 4)]
    for w in range(2):
        assert [n for n in order if n.startswith(f"p{w}-")] == [f"p{w}-t{t}" for t in range(turns)]
    switches = sum(a[:2] != b[:2] for a, b in itertools.pairwise(order))
    assert switches > 1  # the two really wrote at the same time
    # commit order: a turn whose save returned before another's began comes first
    logs = [json.loads((tmp_path / f"log{p}").read_text()) for p in range(2)]
    position = {name: n for n, name in enumerate(order)}
    saves = [(name, start, end) for log in logs for name, start, end in log]
    ends = sorted((end, position[name]) for name, _, end in saves)
    for name, start, _ in saves:
        earlier = [pos for end, pos in ends if end < start]
        if earlier:
            assert max(earlier) < position[name], name
    await store.aclose()


# --- one lease, one checkpoint across processes -----------------------------------------------

RACE_WORKER = r"""
import os, sys, time
from datetime import datetime, timezone
import anyio
from storage.abilities import SummaryCheckpoint
from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage

root, proc, go, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

async def main():
    store = JsonlChatStorage(root)
    key = ChatKey("u", "s", "a")
    open(out + ".ready", "w").close()
    while not os.path.exists(go):
        await anyio.sleep(0.001)
    leased = await store.acquire_lease(key, f"worker-{proc}", 3600)
    head = await store.head(key)
    summary = ChatMessage("system", f"by {proc}", metadata={"chatlayers": {"summary": True}})
    now = datetime.now(timezone.utc)
    made = SummaryCheckpoint((summary,), head.last_seq, head.epoch, proc, now)
    stored = await store.save_checkpoint(key, made, expected_version=head.checkpoint_version)
    with open(out, "w") as f:
        f.write(f"{int(leased)} {0 if stored is None else stored.version}")
    await store.aclose()

anyio.run(main)
"""


async def test_one_lease_and_one_checkpoint_win_across_processes(tmp_path: Path) -> None:
    root, go = tmp_path / "store", tmp_path / "go"
    async with JsonlChatStorage(root) as store:
        await store.save_messages(KEY, [ChatMessage("user", f"m{i}") for i in range(10)])
    outs = [tmp_path / f"out{p}" for p in range(4)]
    procs = [spawn(RACE_WORKER, root, p, go, out) for p, out in enumerate(outs)]
    start_together(procs, go, outs)
    results = [(tmp_path / f"out{p}").read_text().split() for p in range(4)]
    assert sorted(int(leased) for leased, _ in results) == [0, 0, 0, 1]
    versions = [int(version) for _, version in results]
    assert versions.count(1) == 1  # one compare-and-set from version 0 wins
    assert all(v in (0, 1, 2, 3, 4) for v in versions)
    async with JsonlChatStorage(root) as store:
        loaded = await store.load_checkpoint(KEY)
        assert loaded is not None
        assert loaded.version == max(versions)
        assert (await store.head(KEY)).checkpoint_version == loaded.version


# --- kill -9 in the middle of sidecar writes ---------------------------------------------------

KILL_WORKER = r"""
import os, sys
from datetime import datetime, timezone
import anyio
from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage

root, acks = sys.argv[1], sys.argv[2]

def ack(fd, *words):
    os.write(fd, (" ".join(map(str, words)) + "\n").encode())

async def main():
    store = JsonlChatStorage(root, fsync="never")
    key = ChatKey("u", "s", "a")
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    n = 0
    while True:
        batch = [ChatMessage("user", f"m{n}-{i} " + "x" * (2000 * (n % 3))) for i in range(3)]
        await store.save_messages(key, batch)
        ack(fd, "msg", *(m.id for m in batch))
        record = await store.save_record(key, ConversationRecord("step", {"n": n}))
        ack(fd, "rec", record.id)
        head = await store.head(key)
        text = f"summary {n} " + "y" * (3000 * (n % 4))
        summary = ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})
        now = datetime.now(timezone.utc)
        made = SummaryCheckpoint((summary,), head.last_seq, head.epoch, "w", now)
        stored = await store.save_checkpoint(key, made, expected_version=head.checkpoint_version)
        if stored is not None:
            ack(fd, "ckpt", stored.version, head.epoch)
        await store.acquire_lease(key, f"owner-{n}", 30)
        ack(fd, "lease", f"owner-{n}")
        if n % 10 == 9:
            kept = await store.fetch(key, limit=6)
            await store.replace(key, kept)
            ack(fd, "replace", *(m.id for m in kept))
        n += 1

anyio.run(main)
"""


def start_together(procs: list[subprocess.Popen[bytes]], go: Path, outs: list[Path]) -> None:
    """Touch ``go`` once every worker is ready (``<out>.ready``), so they contend."""
    while not all(Path(f"{out}.ready").exists() for out in outs):
        assert all(p.poll() is None for p in procs)
        time.sleep(0.01)  # waiting, not a pass/fail timing
    go.touch()
    for p in procs:
        assert p.wait(timeout=120) == 0


def kill_after(proc: subprocess.Popen[bytes], acks: Path, count: int) -> None:
    """SIGKILL ``proc`` once ``acks`` holds ``count`` acknowledgements (mid-write, likely)."""
    try:
        deadline = time.monotonic() + 60
        while len(acked(acks) if acks.exists() else []) < count:
            assert proc.poll() is None, "worker exited early"
            assert time.monotonic() < deadline, "worker acknowledged too little"
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def acked(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
async def test_sigkill_during_sidecar_writes_keeps_every_acknowledged_write(
    tmp_path: Path,
) -> None:
    root, acks = tmp_path / "store", tmp_path / "acks"
    for round_no in range(3):
        before = len(acked(acks)) if acks.exists() else 0
        kill_after(spawn(KILL_WORKER, root, acks), acks, before + 25 + 17 * round_no)
        lines = acked(acks)
        last_replace = max((i for i, line in enumerate(lines) if line[0] == "replace"), default=-1)
        async with JsonlChatStorage(root) as store:
            fetched = await store.fetch(KEY)
            ids = {m.id for m in fetched}
            records = {r.id for r in await store.fetch_records(KEY)}
            for i, (kind, *rest) in enumerate(lines):
                if kind == "msg" and i > last_replace:
                    assert ids.issuperset(rest), i
                elif kind == "replace" and i == last_replace:
                    assert ids.issuperset(rest)
                elif kind == "rec":
                    assert rest[0] in records, i
            head = await store.head(KEY)
            checkpoints = [line for line in lines if line[0] == "ckpt"]
            loaded = await store.load_checkpoint(KEY)
            if checkpoints and checkpoints[-1][2] == head.epoch:
                assert loaded is not None  # never torn: the old one or the new one
                assert loaded.version >= int(checkpoints[-1][1])
            lease_file = root / "u" / "s" / "a.lease"
            if lease_file.exists():
                json.loads(lease_file.read_bytes())  # whole, never torn
            data = (root / "u" / "s" / "a.jsonl").read_bytes()
            assert data.startswith(b'{"hdr":1,"epoch":"')
            # a new worker goes on from whatever the kill left
            assert len(await store.save(KEY, ChatMessage("user", f"after {round_no}"))) == 1
            assert (await store.head(KEY)).last_seq > head.last_seq
    async with JsonlChatStorage(root) as store:
        await store.delete(KEY)
    assert not (root / "u").exists()  # every leftover of the kills went with the key


async def test_two_instances_see_each_others_heads_checkpoints_and_records(tmp_path: Path) -> None:
    a, b = JsonlChatStorage(tmp_path), JsonlChatStorage(tmp_path)
    await a.save(KEY, ChatMessage("user", "1"))
    head = await b.head(KEY)
    await b.save(KEY, ChatMessage("user", "2"))
    assert (await a.head(KEY)).last_seq > head.last_seq
    tail = await a.fetch_since(KEY, head.last_seq)
    assert [m.text for m in tail.messages] == ["2"]
    summary = ChatMessage("system", "s", metadata={"chatlayers": {"summary": True}})
    now = tail.messages[0].created_at
    assert now is not None
    made = SummaryCheckpoint((summary,), tail.head.last_seq, tail.head.epoch, "t", now)
    assert await a.save_checkpoint(KEY, made, expected_version=0) is not None
    assert (await b.head(KEY)).checkpoint_version == 1
    stored = await b.save_record(KEY, ConversationRecord("k", {"v": 1}))
    assert await a.fetch_records(KEY) == [stored]
    await b.replace(KEY, [ChatMessage("user", "fresh")])
    assert (await a.head(KEY)).epoch != tail.head.epoch
    assert await a.load_checkpoint(KEY) is None
    assert [m.text for m in await a.fetch(KEY)] == ["fresh"]
    await a.aclose()
    await b.aclose()
