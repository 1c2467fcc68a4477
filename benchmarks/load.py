"""Load: P worker processes x C concurrent conversations x T turns through the production stack.

    python -m benchmarks.load [--quick] [--start-servers] [--processes 1,2,4]
                              [--conversations C] [--turns T] [--out DIR]

Each worker process opens ``summarize?trigger_tokens=N&background=true::scrub::<store>``
(PII scrubbed, summaries made in the background as checkpoints in the store, coherent views:
the defaults) and runs C conversations concurrently, T turns each; a turn is what an
orchestrator does around one model call: ``fetch`` the view, ``save`` the user message,
``save`` the reply (no model is called). The messages are the shipped conversations' user
and assistant texts (``examples/data``), so the scrubber and the summarizer work on real text.
Stores: SQLite (a file), Redis and PostgreSQL (``CHATLAYERS_BENCH_REDIS_URL`` /
``CHATLAYERS_BENCH_POSTGRES_DSN``, or ``--start-servers`` for throw-away local servers).

Reported per store and P: turns/s (all workers, from a common start to the last worker's
end), p50 and p99 turn latency, summarizer calls per threshold crossing (calls of every
worker over the checkpoints stored), errors (turns that raised) and lost messages (after
the run every conversation's record is read back from the bare store and compared with what
was saved: a missing, extra or reordered message is lost). Both must be 0. Writes
``load.md``, ``load.json`` and ``load.png`` to ``--out`` (``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import multiprocessing
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from benchmarks.data import shipped_messages
from storage import ChatKey, ChatMessage, SummarizingChatStorage, open_storage

RESULTS = Path(__file__).resolve().parent / "results"
_STACK = "summarize?trigger_tokens={trigger}&background=true::scrub::{store}"


@cache
def turn_texts() -> tuple[tuple[str, str], ...]:
    """(user text, assistant reply) pairs of the shipped conversations, in file order."""
    source = shipped_messages()
    pairs = []
    for first, second in itertools.pairwise(source):
        texts = first.get("content"), second.get("content")
        if (first["role"], second["role"]) == ("user", "assistant") and all(
            isinstance(t, str) and t.strip() for t in texts
        ):
            pairs.append((str(texts[0]), str(texts[1])))
    return tuple(pairs)


def conversation_key(run: str, process: int, conversation: int) -> ChatKey:
    return ChatKey(f"load-{run}-p{process}", f"c{conversation}", "agent")


def turn_messages(run: str, process: int, conversation: int, turn: int) -> list[ChatMessage]:
    """The user message and the reply of one turn, with ids the check finds them by."""
    pairs = turn_texts()
    user, reply = pairs[(process * 7919 + conversation * 104729 + turn) % len(pairs)]
    base = f"{run}.{process}.{conversation}.{turn}"
    return [
        ChatMessage("user", user, id=f"{base}.u"),
        ChatMessage("assistant", reply, id=f"{base}.a"),
    ]


# --- one worker process ----------------------------------------------------------------------


def _worker(
    url: str,
    run: str,
    process: int,
    conversations: int,
    turns: int,
    barrier: Any,
    out: str,
) -> None:
    async def conversation(
        stack: Any, number: int, latencies: list[int], errors: list[str]
    ) -> None:
        key = conversation_key(run, process, number)
        for turn in range(turns):
            user, reply = turn_messages(run, process, number, turn)
            started = time.perf_counter_ns()
            try:
                await stack.fetch(key)
                await stack.save(key, user)
                await stack.save(key, reply)
            except Exception as exc:  # counted: the run goes on
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter_ns() - started)

    async def work() -> dict[str, Any]:
        latencies: list[int] = []
        errors: list[str] = []
        async with open_storage(url) as stack:
            layer = next(c for c in stack.components() if isinstance(c, SummarizingChatStorage))
            # Warm up (connections, the tokenizer, the scrubber's patterns), untimed.
            warm = ChatKey(f"load-{run}-p{process}", "warm-up", "agent")
            for message in turn_messages(run, process, -1, 0):
                await stack.save(warm, message)
                await stack.fetch(warm)
            await stack.delete(warm)
            calls = layer.summarizer_calls
            await anyio.to_thread.run_sync(barrier.wait)
            started = time.perf_counter()
            async with anyio.create_task_group() as tasks:
                for number in range(conversations):
                    tasks.start_soon(conversation, stack, number, latencies, errors)
            elapsed = time.perf_counter() - started
            await layer.drain()  # summaries still running are counted, not cancelled
            return {
                "elapsed": elapsed,
                "latencies_ns": latencies,
                "errors": errors,
                "summarizer_calls": layer.summarizer_calls - calls,
                "summaries_made": layer.summaries_made,
                "lease_busy": layer.lease_busy,
                "checkpoint_conflicts": layer.checkpoint_conflicts,
            }

    result = anyio.run(work)
    Path(out).write_text(json.dumps(result), encoding="utf-8")


# --- one run: P processes on one store ---------------------------------------------------------


async def _check(
    store_url: str, run: str, processes: int, conversations: int, turns: int
) -> dict[str, int]:
    """Read every conversation back from the bare store: messages lost (missing, extra or out
    of order) and threshold crossings (stored checkpoint versions)."""
    lost = crossings = 0
    async with open_storage(store_url) as store:
        for process in range(processes):
            for number in range(conversations):
                key = conversation_key(run, process, number)
                expected = [
                    m.id for t in range(turns) for m in turn_messages(run, process, number, t)
                ]
                stored = [m.id for m in await store.fetch(key)]
                if stored != expected:
                    kept = set(stored)
                    missing = sum(1 for i in expected if i not in kept)
                    extra = len(stored) - (len(expected) - missing)
                    lost += missing + extra or 1  # 1: the same messages in another order
                checkpoint = await store.load_checkpoint(key)
                crossings += checkpoint.version if checkpoint is not None else 0
                await store.delete(key)
    return {"lost": lost, "crossings": crossings}


def percentile(values: list[int], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))] / 1e6


def run_load(
    store: str,
    store_url: str,
    processes: int,
    conversations: int,
    turns: int,
    trigger: int,
    tmp: Path,
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    url = _STACK.format(trigger=trigger, store=store_url)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    outs = [tmp / f"{run}-{p}.json" for p in range(processes)]
    workers = [
        ctx.Process(target=_worker, args=(url, run, p, conversations, turns, barrier, str(outs[p])))
        for p in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results = []
    for worker, out in zip(workers, outs, strict=True):
        if worker.exitcode != 0 or not out.exists():
            raise RuntimeError(f"a load worker on {store} exited with {worker.exitcode}")
        results.append(json.loads(out.read_text(encoding="utf-8")))
    checked = anyio.run(_check, store_url, run, processes, conversations, turns)
    latencies = [ns for r in results for ns in r["latencies_ns"]]
    errors = [e for r in results for e in r["errors"]]
    calls = sum(r["summarizer_calls"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    return {
        "store": store,
        "processes": processes,
        "conversations": processes * conversations,
        "turns": processes * conversations * turns,
        "seconds": elapsed,
        "turns_per_s": len(latencies) / elapsed if elapsed else math.nan,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "summarizer_calls": calls,
        "crossings": checked["crossings"],
        "calls_per_crossing": calls / checked["crossings"] if checked["crossings"] else math.nan,
        "lease_busy": sum(r["lease_busy"] for r in results),
        "checkpoint_conflicts": sum(r["checkpoint_conflicts"] for r in results),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "lost": checked["lost"],
    }


# --- the report --------------------------------------------------------------------------------


def store_urls(tmp: Path, run: str) -> Iterator[tuple[str, str]]:
    yield "sqlite", f"sqlite:///{tmp / 'load.db'}"
    redis = os.environ.get("CHATLAYERS_BENCH_REDIS_URL")
    if redis:
        yield "redis", redis + ("&" if "?" in redis else "?") + f"prefix=load-{run}-"
    postgres = os.environ.get("CHATLAYERS_BENCH_POSTGRES_DSN")
    if postgres:
        yield "postgres", postgres + ("&" if "?" in postgres else "?") + f"schema=load_{run}"


def markdown(rows: list[dict[str, Any]], settings: dict[str, Any], png: str) -> str:
    lines = [
        "## Load: P processes x C conversations x T turns (fetch, save, save)",
        "",
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores; stack `{settings['stack']}`; C = {settings['conversations']} "
        f"concurrent conversations per process, T = {settings['turns']} turns each; shipped "
        "messages (examples/data), no model call.",
        "",
        "| store | P | turns | turns/s | p50 turn (ms) | p99 turn (ms) | summarizer calls "
        "| crossings | calls per crossing | errors | lost messages |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['store']} | {r['processes']} | {r['turns']:,} | {r['turns_per_s']:,.0f} | "
            f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['summarizer_calls']} | "
            f"{r['crossings']} | {r['calls_per_crossing']:.2f} | {r['errors']} | {r['lost']} |"
        )
    lines += [
        "",
        "A crossing is a stored checkpoint (a key's checkpoint version at the end). Lost: "
        "messages missing, extra or out of order when each record is read back from the bare "
        "store.",
        "",
        f"![turns per second and p99 latency]({png})",
        "",
    ]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for store in dict.fromkeys(r["store"] for r in rows):
        mine = [r for r in rows if r["store"] == store]
        ps = [r["processes"] for r in mine]
        left.plot(ps, [r["turns_per_s"] for r in mine], marker="o", label=store)
        right.plot(ps, [r["p99_ms"] for r in mine], marker="o", label=store)
    for axis, label in ((left, "turns/s"), (right, "p99 turn latency (ms)")):
        axis.set_xlabel("worker processes (P)")
        axis.set_ylabel(label)
        axis.set_xticks(sorted({r["processes"] for r in rows}))
        axis.grid(True, alpha=0.3)
        axis.legend()
    fig.suptitle("chatlayers under load: summarize (background) :: scrub :: store")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run (seconds)")
    parser.add_argument("--processes", default=None, help="P values, comma-separated (1,2,4)")
    parser.add_argument("--conversations", type=int, default=None, help="C per process (16)")
    parser.add_argument("--turns", type=int, default=None, help="T per conversation (60)")
    parser.add_argument(
        "--trigger-tokens", type=int, default=None, help="the summary budget (2000 tokens)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"output folder ({RESULTS})")
    parser.add_argument("--start-servers", action="store_true", help="local redis + postgres")
    args = parser.parse_args(argv)
    quick = args.quick
    processes = [int(p) for p in (args.processes or ("1,2" if quick else "1,2,4")).split(",")]
    conversations = args.conversations or (2 if quick else 16)
    turns = args.turns or (8 if quick else 60)
    trigger = args.trigger_tokens or (500 if quick else 2000)
    os.environ.setdefault("CHATLAYERS_PII_SECRET", "load-benchmark")  # the workers inherit it
    started = time.perf_counter()
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="chatlayers-load-") as name,
        contextlib.ExitStack() as servers,
    ):
        tmp = Path(name)
        if args.start_servers:
            from benchmarks.__main__ import _start_servers

            for note in _start_servers(servers, tmp):
                print(f"[load] {note}", file=sys.stderr)
        run = uuid.uuid4().hex[:8]
        for store, store_url in store_urls(tmp, run):
            for p in processes:
                row = run_load(store, store_url, p, conversations, turns, trigger, tmp)
                print(
                    f"[load] {store} P={p}: {row['turns_per_s']:.0f} turns/s, "
                    f"p99 {row['p99_ms']:.1f} ms, errors {row['errors']}, lost {row['lost']}",
                    file=sys.stderr,
                )
                rows.append(row)
    settings = {
        "stack": _STACK.format(trigger=trigger, store="<store>"),
        "conversations": conversations,
        "turns": turns,
        "processes": processes,
        "quick": quick,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "load_quick" if quick else "load"
    png = args.out / f"{stem}.png"
    plot(rows, png)
    text = markdown(rows, settings, png.name)
    (args.out / f"{stem}.md").write_text(text, encoding="utf-8")
    (args.out / f"{stem}.json").write_text(
        json.dumps({"settings": settings, "rows": rows}, indent=2, default=str) + "\n",
        encoding="utf-8",
    )
    print(text)
    print(
        f"[load] wrote {args.out / (stem + '.md')}, .json and .png in "
        f"{time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    bad = [r for r in rows if r["errors"] or r["lost"]]
    for r in bad:
        print(f"[load] {r['store']} P={r['processes']}: {r['first_error']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
