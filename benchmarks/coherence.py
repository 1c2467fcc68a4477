"""What coherence costs, and what shared summaries save.

    python -m benchmarks.coherence [--quick] [--start-servers]

Part 1, per store (memory, SQLite, JSONL; Redis and PostgreSQL with
``CHATLAYERS_BENCH_REDIS_URL`` / ``CHATLAYERS_BENCH_POSTGRES_DSN`` or ``--start-servers``):
one conversation of ``--messages`` real messages (``examples/data``, cycled), summarized,
and these contenders, interleaved:

- ``store.fetch(limit=1)``: the same store's cheapest read, the reference;
- ``store.head()``: the read coherence adds;
- ``coherent``: ``SummarizingChatStorage(coherence="store")`` fetching a cached key (one head
  read, nothing changed, view served from memory);
- ``pinned``: the same with ``coherence="process"`` (no read at all);
- ``after a save``: a coherent fetch right after a save through another instance (head read
  plus one ``fetch_since`` range read; a summary when the view crosses the trigger), the
  save untimed.

Target: ``coherent`` within 1.5x of ``fetch(limit=1)``.

Part 2, over SQLite: 4 worker processes save and fetch one long conversation (each its own
turns); counted: summarizer calls and checkpoints (threshold crossings), then the calls a
restarted worker makes to serve the same view, and for comparison the same run with
``summaries="memory"`` (in-process summaries: every worker and every restart summarizes on its own).
Prints markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from benchmarks.data import history
from benchmarks.timing import Contender, interleaved
from storage import open_storage
from storage.abilities import CheckpointStorage, find_ability
from storage.history import last_turns_start
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage

KEY = ChatKey("bench", "session", "agent")
OTHER = ChatKey("bench", "session", "other")


# --- part 1: the cost of a coherent fetch ----------------------------------------------------


def store_urls(workdir: Path) -> Iterator[tuple[str, str]]:
    yield "memory", "memory://"
    yield "sqlite", f"sqlite:///{workdir / 'coherence.db'}"
    yield "jsonl", f"jsonl://{workdir / 'coherence-jsonl'}"
    redis = os.environ.get("CHATLAYERS_BENCH_REDIS_URL")
    if redis:
        yield "redis", redis
    postgres = os.environ.get("CHATLAYERS_BENCH_POSTGRES_DSN")
    if postgres:
        yield "postgres", postgres


async def fetch_costs(name: str, url: str, messages: int, rounds: int) -> dict[str, float]:
    store: Any = open_storage(url).inner
    with contextlib.suppress(Exception):
        await store.delete_user(KEY.user_id)
    wires = history(messages)
    batch = [ChatMessage.from_openai(w) for w in wires]
    for start in range(0, len(batch), 200):
        await store.save_messages(KEY, batch[start : start + 200])
    coherent = SummarizingChatStorage(store, trigger_at=20, keep_last=2)
    pinned = SummarizingChatStorage(store, trigger_at=20, keep_last=2, coherence="process")
    writer = SummarizingChatStorage(store, trigger_at=20, keep_last=2)
    follower = SummarizingChatStorage(store, trigger_at=20, keep_last=2)
    await coherent.fetch(KEY)  # summarizes once, stores the checkpoint
    await pinned.fetch(KEY)
    await follower.fetch(KEY)
    ck = find_ability(store, CheckpointStorage)
    assert ck is not None
    contenders = [
        Contender("fetch(limit=1)", lambda: store.fetch(KEY, limit=1), True),
        Contender("head()", lambda: ck.head(KEY), True),
        Contender("coherent", lambda: coherent.fetch(KEY), True),
        Contender("pinned", lambda: pinned.fetch(KEY), True),
    ]
    await interleaved(contenders, rounds=rounds, round_budget_s=0.02, max_calls=2000)
    costs = {c.name: c.samples.median_us for c in contenders}
    # A coherent fetch right after a save through another instance: the save untimed.
    after: list[int] = []
    for n in range(rounds * 40):
        await writer.save(KEY, ChatMessage("user", f"elsewhere {n}"))
        start = time.perf_counter_ns()
        await follower.fetch(KEY)
        after.append(time.perf_counter_ns() - start)
    costs["after a save"] = statistics.median(after) / 1000
    await store.delete_user(KEY.user_id)
    await store.aclose()
    return costs


# --- part 2: summarizer calls of a fleet ---------------------------------------------------


class Counting:
    """The extractive summarizer, with one line per call appended to a shared file."""

    def __init__(self, path: str) -> None:
        from summarizers import ExtractiveSummarizer

        self.path = path
        self.inner = ExtractiveSummarizer()

    async def __call__(self, history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        start = last_turns_start(history, keep_last)
        _append_line(self.path, json.dumps({"pid": os.getpid(), "n": start}))
        return await self.inner(history, keep_last)


def _append_line(path: str, line: str) -> None:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line + "\n")


def _worker(url: str, counter: str, worker: int, turns: int, summaries: str) -> None:
    async def work() -> None:
        layer = SummarizingChatStorage(
            open_storage(url).inner,
            Counting(counter),
            trigger_at=5,
            keep_last=1,
            summaries=summaries,  # type: ignore[arg-type]
        )
        for n in range(turns):
            await layer.save_messages(
                KEY,
                [
                    ChatMessage("user", f"worker {worker} asks question {n}."),
                    ChatMessage("assistant", f"Worker {worker} answer {n}."),
                ],
            )
            await layer.fetch(KEY)
        await layer.aclose()

    anyio.run(work)


def _restart(url: str, counter: str, summaries: str) -> None:
    async def work() -> None:
        layer = SummarizingChatStorage(
            open_storage(url).inner,
            Counting(counter),
            trigger_at=5,
            keep_last=1,
            summaries=summaries,  # type: ignore[arg-type]
        )
        await layer.fetch(KEY)
        await layer.aclose()

    anyio.run(work)


def _count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def fleet_calls(workdir: Path, summaries: str, turns: int) -> dict[str, int]:
    url = f"sqlite:///{workdir / f'fleet-{summaries}.db'}"
    counter = workdir / f"calls-{summaries}.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_worker, args=(url, str(counter), w, turns, summaries)) for w in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    calls = _count(counter)
    restart = ctx.Process(target=_restart, args=(url, str(counter), summaries))
    restart.start()
    restart.join()

    async def crossings() -> int:
        store: Any = open_storage(url).inner
        checkpoint = await store.load_checkpoint(KEY)
        await store.aclose()
        return checkpoint.version if checkpoint is not None else 0

    return {
        "calls": calls,
        "checkpoints": anyio.run(crossings) if summaries == "store" else 0,
        "restart calls": _count(counter) - calls,
    }


# --- main ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.coherence", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run (seconds)")
    parser.add_argument("--messages", type=int, default=1000, help="raw history length")
    parser.add_argument("--start-servers", action="store_true", help="local redis + postgres")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else 15
    turns = 6 if args.quick else 25
    with tempfile.TemporaryDirectory(prefix="chatlayers-coherence-") as tmp:
        workdir = Path(tmp)
        with contextlib.ExitStack() as servers:
            if args.start_servers:
                from benchmarks.__main__ import _start_servers

                for note in _start_servers(servers, workdir):
                    print(f"[bench] {note}", file=sys.stderr)
            print(f"## Coherent fetch cost ({args.messages} raw messages, summarized)\n")
            print(
                f"{platform.python_implementation()} {platform.python_version()}, medians in µs\n"
            )
            print(
                "| store | fetch(limit=1) | head() | coherent | pinned | after a save "
                "| coherent / fetch(limit=1) |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|")
            for name, url in store_urls(workdir):
                costs = anyio.run(fetch_costs, name, url, args.messages, rounds)
                ratio = costs["coherent"] / costs["fetch(limit=1)"]
                print(
                    f"| {name} | {costs['fetch(limit=1)']:.1f} | {costs['head()']:.1f} | "
                    f"{costs['coherent']:.1f} | {costs['pinned']:.1f} | "
                    f"{costs['after a save']:.1f} | {ratio:.2f}x |"
                )
        print(
            f"\n## Summarizer calls: 4 worker processes x one conversation ({4 * turns * 2} "
            "messages, trigger_at=5, SQLite)\n"
        )
        print("| summaries | calls | threshold crossings (checkpoints) | calls after a restart |")
        print("|---|---:|---:|---:|")
        for summaries in ("store", "memory"):
            made = fleet_calls(workdir, summaries, turns)
            crossings = str(made["checkpoints"]) if summaries == "store" else "n/a"
            print(f"| {summaries} | {made['calls']} | {crossings} | {made['restart calls']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
