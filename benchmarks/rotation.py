"""A live worker's keyring writes while ``keys rotate`` runs in another process.

    python -m benchmarks.rotation [--quick] [--keys N]

A SQLite keyring holding N data keys (default 10,000) wrapped by an old master key. A worker
process makes new users through ``encrypt::sqlite`` without pause, timing each new user's
keyring write (``Keyring.add``: one write transaction of the keyring file) and each whole
save of a new user; another process rotates every key to a new master key. Three runs, each
on a fresh keyring:

- ``idle``: the worker alone (the floor);
- ``rotate (batched)``: ``rotate_keys`` as ``chatlayers keys rotate`` runs it: batches of
  256 entries in one transaction each, a pause after each at least as long as the write;
- ``rotate (per entry)``: the rotation before batching: one compare-and-set and a WAL
  checkpoint per entry, back to back, no pause.

Only the worker's writes made while the rotation ran count. Prints markdown: p50 and p99 of
the keyring write and of the save, in ms, failed writes, and how long the rotation took.
Target: keyring write p99 under 50 ms during a batched rotation of 10,000 keys.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from storage.errors import ChatStorageError
from storage.layers.encrypting import (
    EncryptingChatStorage,
    SQLiteKeyring,
    WrappedKey,
    new_master_key,
    rotate_keys,
)
from storage.layers.encrypting.master import parse_master_keys
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage

TARGET_MS = 50.0


class _TimedKeyring(SQLiteKeyring):
    """The worker's keyring: each ``add`` timed (monotonic start, seconds)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.adds: list[tuple[float, float]] = []

    async def add(self, entry: WrappedKey) -> WrappedKey:
        began = time.monotonic()
        try:
            return await super().add(entry)
        finally:
            self.adds.append((began, time.monotonic() - began))


async def _worker(spec: dict[str, Any]) -> None:
    """Make new users until a line arrives on stdin; print the timings as JSON."""
    ring = _TimedKeyring(Path(spec["keyring"]))
    layer = EncryptingChatStorage(SQLiteChatStorage(spec["data"]), keys=spec["keys"], keyring=ring)
    saves: list[tuple[float, float]] = []
    failures = 0
    stop = anyio.Event()

    async def wait_for_stop() -> None:
        await anyio.to_thread.run_sync(sys.stdin.readline)
        stop.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_for_stop)
        print("ready", flush=True)
        n = 0
        while not stop.is_set():
            key = ChatKey(f"worker-{os.getpid()}-{n}", "s", "a")
            began = time.monotonic()
            try:
                await layer.save(key, ChatMessage("user", f"hello {n}"))
                saves.append((began, time.monotonic() - began))
            except ChatStorageError:  # "database is locked" after the busy timeout
                failures += 1
            n += 1
            await anyio.lowlevel.checkpoint()
    await layer.aclose()
    print(json.dumps({"adds": ring.adds, "saves": saves, "failures": failures}), flush=True)


async def _per_entry(keyring: SQLiteKeyring, keys: str) -> None:
    """The rotation before batching: one compare-and-set (and WAL checkpoint) per entry."""
    masters = parse_master_keys(keys, "benchmark")
    newest = masters.newest
    for entry in await keyring.entries():
        old = masters.find(entry.master)
        if entry.master == newest.fingerprint or old is None:
            continue
        secret = old.unwrap(entry.user_id, entry.key_id, entry.wrapped)
        fresh = WrappedKey(
            entry.user_id,
            entry.key_id,
            newest.fingerprint,
            newest.wrap(entry.user_id, entry.key_id, secret),
        )
        await keyring.rewrap(fresh, expected=entry)


async def _rotator(spec: dict[str, Any]) -> None:
    keyring = SQLiteKeyring(spec["keyring"])
    began = time.monotonic()
    if spec["mode"] == "batched":
        await rotate_keys(keyring, parse_master_keys(spec["keys"], "benchmark"))
    else:
        await _per_entry(keyring, spec["keys"])
    print(json.dumps({"began": began, "ended": time.monotonic()}), flush=True)
    await keyring.aclose()


def _fill(root: Path, count: int, old: str) -> tuple[Path, Path]:
    """A fresh keyring of ``count`` data keys wrapped by ``old``, and a data store."""
    ring, data = root / "keys.db", root / "chats.db"
    anyio.run(SQLiteKeyring(ring).create)
    wrapper = parse_master_keys(old, "benchmark").newest
    db = sqlite3.connect(ring)
    with db:
        db.executemany(
            "INSERT INTO data_keys VALUES (?, ?, ?, ?, ?)",
            (
                (
                    f"user-{n:06d}",
                    f"{n:016x}",
                    wrapper.fingerprint,
                    wrapper.wrap(f"user-{n:06d}", f"{n:016x}", os.urandom(32)),
                    0.0,
                )
                for n in range(count)
            ),
        )
    db.close()
    return ring, data


def _spawn(role: str, spec: dict[str, Any]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.rotation", f"--{role}", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def measure(root: Path, mode: str, count: int, idle_s: float) -> dict[str, float]:
    """One run: the worker's timings while the rotation (or ``idle_s`` of nothing) ran."""
    old, new = new_master_key(), new_master_key()
    root.mkdir()
    ring, data = _fill(root, count, old)
    worker = _spawn("worker", {"keyring": str(ring), "data": str(data), "keys": old})
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # the worker in its stride
    if mode == "idle":
        began = time.monotonic()
        time.sleep(idle_s)
        ended = time.monotonic()
    else:
        rotator = _spawn("rotator", {"keyring": str(ring), "keys": f"{new},{old}", "mode": mode})
        out, _ = rotator.communicate()
        window = json.loads(out.strip().splitlines()[-1])
        began, ended = window["began"], window["ended"]
    result = json.loads(worker.communicate("stop\n")[0].strip().splitlines()[-1])
    adds = [took * 1000 for at, took in result["adds"] if began <= at <= ended]
    saves = [took * 1000 for at, took in result["saves"] if began <= at <= ended]
    return {
        "writes": len(adds),
        "add_p50": _percentile(adds, 0.5),
        "add_p99": _percentile(adds, 0.99),
        "add_max": max(adds, default=math.nan),
        "save_p50": _percentile(saves, 0.5),
        "save_p99": _percentile(saves, 0.99),
        "failures": result["failures"],
        "seconds": ended - began,
    }


def report(count: int, rows: list[tuple[str, dict[str, float]]]) -> str:
    lines = [
        f"Worker keyring writes during a rotation of {count:,} keys (SQLite keyring; ms)",
        "",
        "| run | writes | keyring write p50 | p99 | max | new-user save p50 | p99 "
        "| failed | rotation s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        seconds = "" if name == "idle" else f"{r['seconds']:.2f}"
        lines.append(
            f"| {name} | {r['writes']:,.0f} | {r['add_p50']:.2f} | {r['add_p99']:.2f} | "
            f"{r['add_max']:.2f} | {r['save_p50']:.2f} | {r['save_p99']:.2f} | "
            f"{r['failures']:.0f} | {seconds} |"
        )
    batched = dict(rows)["rotate (batched)"]["add_p99"]
    verdict = "met" if batched < TARGET_MS else "NOT met"
    lines += [
        "",
        f"Target: keyring write p99 under {TARGET_MS:.0f} ms while rotating: "
        f"{batched:.2f} ms ({verdict}).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 keys, shorter idle run")
    parser.add_argument("--keys", type=int, default=None, help="data keys to rotate (10,000)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--rotator", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        anyio.run(_worker, json.loads(args.worker))
        return 0
    if args.rotator:
        anyio.run(_rotator, json.loads(args.rotator))
        return 0
    count = args.keys or (2_000 if args.quick else 10_000)
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, mode in (
            ("idle", "idle"),
            ("rotate (batched)", "batched"),
            ("rotate (per entry)", "per-entry"),
        ):
            rows.append((name, measure(root / mode, mode, count, 1.0 if args.quick else 3.0)))
    sys.stdout.write(report(count, rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
