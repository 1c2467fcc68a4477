"""Key rotation is online and resumable: ``rotate_keys`` re-wraps in short batches and lets
the workers' own keyring writes in between them; ``chatlayers keys rotate`` killed with
SIGKILL mid-way and run again leaves every data key under the new master key, and every user
readable without the old one. (Timings are measured in ``benchmarks/rotation.py``.)"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from storage.layers.encrypting import (
    DEFAULT_KEY_ENV,
    EncryptingChatStorage,
    SQLiteKeyring,
    key_status,
    new_master_key,
    rotate_keys,
)
from storage.layers.encrypting.master import parse_master_keys
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

OLD = new_master_key()
NEW = new_master_key()


def bulk_fill(path: Path, count: int, master: str) -> None:
    """``count`` users' data keys wrapped by ``master``, written in one transaction (a
    shortcut for the test: a deployment gets them one save at a time)."""
    wrapper = parse_master_keys(master, "test").newest
    db = sqlite3.connect(path)
    with db:
        db.executemany(
            "INSERT INTO data_keys VALUES (?, ?, ?, ?, ?)",
            [
                (
                    f"bulk-{n:06d}",
                    f"{n:016x}",
                    wrapper.fingerprint,
                    wrapper.wrap(f"bulk-{n:06d}", f"{n:016x}", os.urandom(32)),
                    0.0,
                )
                for n in range(count)
            ],
        )
    db.close()


def under(path: Path, master: str) -> int:
    """How many entries ``master`` wraps (read by another connection, as an operator would)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        fp = parse_master_keys(master, "test").newest.fingerprint
        (count,) = db.execute("SELECT count(*) FROM data_keys WHERE master = ?", (fp,)).fetchone()
        return int(count)
    except sqlite3.OperationalError:  # the writer holds a lock for a moment
        return -1
    finally:
        db.close()


async def test_rotation_lets_live_keyring_writes_in_between_its_batches(tmp_path: Path) -> None:
    ring = tmp_path / "keys.db"
    worker = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"), keys=OLD, keyring=ring, create_keyring=True
    )
    await worker.save(ChatKey("first", "s", "a"), ChatMessage("user", "hi"))
    bulk_fill(ring, 3000, OLD)
    rotating = SQLiteKeyring(ring)
    done = anyio.Event()
    during: list[int] = []

    async def rotate() -> None:
        await rotate_keys(rotating, parse_master_keys(f"{NEW},{OLD}", "test"))
        done.set()

    async def live_worker() -> None:
        n = 0
        while not done.is_set():  # a worker making new users while the rotation runs
            await worker.save(ChatKey(f"live-{n}", "s", "a"), ChatMessage("user", f"m{n}"))
            during.append(n)
            n += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(rotate)
        tg.start_soon(live_worker)
    assert len(during) > 1, "the rotation held the keyring until it was done"
    status = await key_status(rotating, parse_master_keys(f"{NEW},{OLD}", "test"))
    # What the worker created under OLD while the rotation ran is rotated by the next run.
    await rotate_keys(rotating, parse_master_keys(f"{NEW},{OLD}", "test"))
    after = await key_status(rotating, parse_master_keys(NEW, "test"))
    assert after.data_keys == status.data_keys == 3001 + len(during)
    assert after.unreadable == 0
    await rotating.aclose()
    await worker.aclose()
    async with EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"), keys=NEW, keyring=ring
    ) as reader:  # the old master key is no longer needed
        assert [m.text for m in await reader.fetch(ChatKey("live-0", "s", "a"))] == ["m0"]
        assert [m.text for m in await reader.fetch(ChatKey("first", "s", "a"))] == ["hi"]


async def _save_users(data: Path, ring: Path, users: list[ChatKey]) -> None:
    async with EncryptingChatStorage(
        SQLiteChatStorage(data), keys=OLD, keyring=ring, create_keyring=True
    ) as store:
        for key in users:
            await store.save(key, ChatMessage("user", f"hello from {key.user_id}"))


async def _read_users(data: Path, ring: Path, users: list[ChatKey], total: int) -> None:
    # The old master key removed: every user still reads.
    async with EncryptingChatStorage(SQLiteChatStorage(data), keys=NEW, keyring=ring) as store:
        for key in users:
            assert [m.text for m in await store.fetch(key)] == [f"hello from {key.user_id}"]
        status = await key_status(store.keyring, store.masters)
        assert (status.data_keys, status.unreadable) == (total, 0)


def test_a_rotation_killed_mid_way_resumes_and_the_old_key_can_go(tmp_path: Path) -> None:
    ring, data = tmp_path / "keys.db", tmp_path / "c.db"
    users = [ChatKey(f"user-{n}", "s", "a") for n in range(5)]
    anyio.run(_save_users, data, ring, users)
    bulk_fill(ring, 10_000, OLD)
    total = 10_005
    url = f"encrypt?keyring={ring}::sqlite:///{data}"
    env = {**os.environ, DEFAULT_KEY_ENV: f"{NEW},{OLD}"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    command = [sys.executable, "-m", "storage.cli", "keys", "rotate", "--url", url]
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while under(ring, NEW) <= 0 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
        assert child.stdout is not None
        assert child.stderr is not None
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    rotated = under(ring, NEW)
    assert 0 < rotated < total, f"not killed mid-way ({rotated} of {total} rotated)"
    again = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert f"re-wrapped {total - rotated:,} data keys" in again.stdout
    assert under(ring, NEW) == total
    anyio.run(_read_users, data, ring, users, total)


def test_the_rotation_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """A small run end to end (its timings are not judged here)."""
    from benchmarks.rotation import main

    assert main(["--quick", "--keys", "300"]) == 0
    out = capsys.readouterr().out
    for row in ("| idle |", "| rotate (batched) |", "| rotate (per entry) |", "Target:"):
        assert row in out
