"""``jsonl://`` tail reads: ``fetch(limit=20)`` on 100 vs 100,000 messages must cost the same.

    python -m benchmarks.jsonl_tail [--quick]

Real messages (``examples/data``, cycled) in one conversation file. Contenders, interleaved:

- floor: a plain synchronous tail read (``pread`` 16 KiB steps from the end, split,
  ``json.loads`` the newest 20 lines); no torn-line or batch checks, no ``ChatMessage`` objects.
- floor + codec: the same with ``storage.codec.decode`` (``ChatMessage`` objects), the part of a
  cold read that is the codec's, not the file store's.
- store, warm: ``await store.fetch(key, limit=20)`` as an agent calls it every turn (decoded
  lines cached by their bytes).
- store, cold: the same with ``cache_bytes=0`` (every line parsed and built every time).
- cold + one thread hop: the cold read run through ``anyio.to_thread.run_sync``, the design
  the store avoids for small reads.

Also the append path: ``save`` of one message under each ``fsync`` policy. Prints markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio

from benchmarks.data import history
from benchmarks.timing import Contender, interleaved
from storage.codec import decode
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.jsonl.cache import LineCache
from storage.stores.jsonl.reads import tail_messages

KEY = ChatKey("bench", "session", "agent")
SIZES = (100, 100_000)
LIMIT = 20


def floor_read(
    path: str, limit: int = LIMIT, decoder: Callable[[str], object] = json.loads
) -> list[object]:
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size
        start, buf = end, b""
        while start > 0 and buf.count(b"\n") <= limit:  # 16 KiB steps until enough lines
            start = max(0, start - 16384)
            buf = os.pread(fd, end - start, start)
    finally:
        os.close(fd)
    lines = buf.split(b"\n")[-limit - 1 : -1]
    return [decoder(line.decode("utf-8")) for line in lines]


async def build(root: Path, n: int) -> Path:
    store = JsonlChatStorage(root, fsync="never")
    done = 0
    while done < n:
        batch = min(2000, n - done)
        await store.save_messages(KEY, [ChatMessage.from_openai(w) for w in history(batch, done)])
        done += batch
    await store.aclose()
    return root / "bench" / "session" / "agent.jsonl"


async def tail_table(workdir: Path, rounds: int, budget: float) -> list[str]:
    rows = [
        "| messages in file | file size | floor (sync, µs) | floor + codec (sync, µs) "
        "| store warm (µs) | store cold (µs) | cold + 1 thread hop (µs) "
        "| warm / floor | cold / floor | cold / (floor + codec) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    no_cache = LineCache(0)
    for n in SIZES:
        root = workdir / f"n{n}"
        path = str(await build(root, n))
        megabytes = os.stat(path).st_size / 1e6
        lock = os.path.join(os.path.dirname(path), ".lock")
        warm = JsonlChatStorage(root)
        cold = JsonlChatStorage(root, cache_bytes=0)
        assert [m.id for m in await warm.fetch(KEY, limit=LIMIT)] == [
            m.id for m in await cold.fetch(KEY, limit=LIMIT)
        ]

        def hop(p: str = path, lock: str = lock) -> object:
            return anyio.to_thread.run_sync(tail_messages, p, lock, LIMIT, no_cache)

        def floor(p: str = path) -> object:
            return floor_read(p)

        def floor_codec(p: str = path) -> object:
            return floor_read(p, decoder=decode)

        def fetch_warm(s: JsonlChatStorage = warm) -> object:
            return s.fetch(KEY, limit=LIMIT)

        def fetch_cold(s: JsonlChatStorage = cold) -> object:
            return s.fetch(KEY, limit=LIMIT)

        contenders = [
            Contender("floor", floor, False),
            Contender("floor+codec", floor_codec, False),
            Contender("warm", fetch_warm, True),
            Contender("cold", fetch_cold, True),
            Contender("hop", hop, True),
        ]
        await interleaved(contenders, rounds=rounds, round_budget_s=budget, max_calls=2000)
        f, fc, w, c, h = (x.samples.median_us for x in contenders)
        rows.append(
            f"| {n:,} | {megabytes:.2f} MB | {f:.1f} | {fc:.1f} | {w:.1f} "
            f"| {c:.1f} | {h:.1f} | {w / f:.2f}x | {c / f:.2f}x | {c / fc:.2f}x |"
        )
        await warm.aclose()
        await cold.aclose()
    return rows


async def append_table(workdir: Path, rounds: int, budget: float) -> list[str]:
    rows = [
        "| fsync policy | save 1 message (µs, median) | p99 (µs) |",
        "|---|---:|---:|",
    ]
    source = history(5000)
    for policy in ("never", "batch", "always"):
        store = JsonlChatStorage(workdir / f"append-{policy}", fsync=policy)

        counter = itertools.count()

        def op(s: JsonlChatStorage = store, c: Iterator[int] = counter) -> object:
            return s.save(KEY, ChatMessage.from_openai(source[next(c) % len(source)]))

        contender = Contender(policy, op, True)
        await interleaved([contender], rounds=rounds, round_budget_s=budget, max_calls=500)
        rows.append(
            f"| `{policy}` | {contender.samples.median_us:.0f} | {contender.samples.p99_us:.0f} |"
        )
        await store.aclose()
    return rows


async def main(quick: bool) -> None:
    rounds, budget = (3, 0.05) if quick else (9, 0.2)
    with tempfile.TemporaryDirectory(prefix="chatlayers-jsonl-bench-") as tmp:
        workdir = Path(tmp)
        tail = await tail_table(workdir, rounds, budget)
        append = await append_table(workdir, rounds, budget)
    print(f"## `jsonl://` newest {LIMIT} messages (`fetch(limit={LIMIT})`)\n")
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, asyncio, medians.\n")
    print("\n".join(tail))
    print("\n## `jsonl://` appends\n")
    print("\n".join(append))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    asyncio.run(main(parser.parse_args().quick))
