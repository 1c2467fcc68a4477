"""What the PII scrubber adds to a batch append, side by side with the SQLite floor.

    python -m benchmarks.scrub_cost [--quick] [--runs N] [--size N]

Three stores, the same ones and the same way ``python -m benchmarks`` measures its
``append_batch`` case (:mod:`benchmarks.subjects`, :func:`benchmarks.timing.interleaved`):
the floor (stdlib ``sqlite3``: ``json.dumps`` of each OpenAI dict, one ``executemany`` in
``BEGIN``/``COMMIT``), ``chatlayers sqlite`` and ``scrub::sqlite``
(``TransformingChatStorage(SQLite, PIIScrubber)``), each appending batches of 100 fresh messages
(in each round the same ones for all) to a conversation of ``--size`` messages; plus the
scrubber alone (its ``transform_batch`` on the batch, no store). Two kinds of messages,
measured one after the other:

- ``shipped``: the real conversations of ``examples/data`` (tau-bench airline tool calls and
  JSON results, SWE-agent code and shell output, Open-Assistant prose), cycled;
- ``agent``: generated agent traffic (:mod:`benchmarks.agent_traffic`).

Each run is ``--rounds`` interleaved rounds in shuffled order, on messages of its own (the
next stretch of the data); ``--runs`` runs in a row show the spread on a shared machine.
Cells: median per batch (wall-clock, as the suite measures, and process CPU time, which a
busy machine disturbs less), messages per second and the ratio to the floor of the same run.
Target: ``scrub::sqlite`` within 4x the floor. Prints markdown.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from benchmarks.agent_traffic import agent_history
from benchmarks.data import Wire, history
from benchmarks.subjects import OurScrubSQLite, OurSQLite, SQLiteFloor, Subject, chat_key
from benchmarks.suite import BATCH
from benchmarks.timing import Contender, interleaved
from storage.message import ChatMessage

TARGET = 4.0
FLOOR, PLAIN, SCRUB, ALONE = (
    SQLiteFloor.name,
    OurSQLite.name,
    OurScrubSQLite.name,
    "PIIScrubber alone (no store)",
)
NAMES = (FLOOR, PLAIN, SCRUB, ALONE)
DATASETS: dict[str, Callable[[int, int], list[Wire]]] = {
    "shipped": history,
    "agent": agent_history,
}

# One run's result: (dataset, subject) -> (median wall µs, median CPU µs) per batch.
Run = dict[tuple[str, str], tuple[float, float]]


def _cpu_timed(op: Callable[[], Any], is_async: bool, out: list[float]) -> Callable[[], Any]:
    """``op``, appending the process CPU time of each call (µs) to ``out``: on a shared
    machine, waiting for a core does not count, so ratios hold up under load."""
    clock = time.process_time
    if is_async:

        async def timed_async() -> None:
            started = clock()
            await op()
            out.append((clock() - started) * 1e6)

        return timed_async

    def timed() -> None:
        started = clock()
        op()
        out.append((clock() - started) * 1e6)

    return timed


class _Fresh:
    """Fresh wire messages for each round, from a moving offset (like the suite's Source).
    Each contender has its own, so in every round all of them append the same messages."""

    def __init__(self, make: Callable[[int, int], list[Wire]], start: int) -> None:
        self.make, self.offset = make, itertools.count(start)

    def __call__(self, n: int) -> list[Wire]:
        return self.make(n, next(self.offset))


def _scrubber_alone(scrub: Any, source: _Fresh) -> tuple[Callable[[], Any], Any]:
    """The layer's transform over one batch (as the layer calls it), with the messages
    built before the round."""
    batches: list[list[ChatMessage]] = []
    key = chat_key("alone")

    async def prepare(calls: int) -> None:
        wires = source(calls * BATCH)
        batches[:] = [
            [ChatMessage.from_openai(w) for w in wires[i : i + BATCH]]
            for i in range(0, len(wires), BATCH)
        ]

    many = getattr(scrub, "transform_batch", None)

    def op() -> None:
        batch = batches.pop()
        if many is not None:
            many(batch, key)
        else:
            for message in batch:
                scrub(message, key)

    return op, prepare


async def measure(workdir: Path, size: int, rounds: int, max_batches: int, runs: int) -> list[Run]:
    scrubbed = OurScrubSQLite(workdir / "scrub")
    subjects: list[Subject] = [
        SQLiteFloor(workdir / "floor"),
        OurSQLite(workdir / "plain"),
        scrubbed,
    ]
    for subject in subjects:
        await subject.open()
    results: list[Run] = [{} for _ in range(runs)]
    try:
        for dataset, make in DATASETS.items():
            key = f"{dataset}{size}"
            for s in subjects:
                await s.load(key, make(size, 0))
            gc.collect()
            gc.freeze()  # as the suite does: setup objects out of the collector's way
            for number, run in enumerate(results):
                start = 1000 + 50 * number  # each run appends messages of its own
                contenders: list[Contender] = []
                cpu: dict[str, list[float]] = {}
                ops = [
                    (s.name, s.is_async, *s.append_op(key, BATCH, _Fresh(make, start)))
                    for s in subjects
                ]
                ops.append(
                    (ALONE, False, *_scrubber_alone(scrubbed.stack.transform, _Fresh(make, start)))
                )
                for name, is_async, op, prepare in ops:
                    cpu[name] = []
                    timed = _cpu_timed(op, is_async, cpu[name])
                    contenders.append(Contender(name, timed, is_async, prepare))
                await interleaved(
                    contenders, rounds=rounds, round_budget_s=0.05, max_calls=max_batches
                )
                for c in contenders:
                    # The warm-up call is in the CPU list only: leave it out.
                    run[(dataset, c.name)] = (
                        c.samples.median_us,
                        statistics.median(cpu[c.name][1:]),
                    )
    finally:
        gc.unfreeze()
        for s in subjects:
            await s.close()
    return results


def _ratios(results: list[Run], dataset: str, name: str, clock: int) -> list[float]:
    return [run[(dataset, name)][clock] / run[(dataset, FLOOR)][clock] for run in results]


def report(results: list[Run], size: int, rounds: int) -> str:
    lines = [
        f"Batch append of {BATCH} messages to a conversation of {size:,} ({len(results)} runs of "
        f"{rounds} interleaved rounds; Python {platform.python_version()}, "
        f"{platform.machine()}). Per batch, the median over the runs of each run's median; "
        "ratios to the floor of the same run (the median, then each run's). Wall-clock time "
        "as `python -m benchmarks` measures it; process CPU time beside it, which a busy "
        "machine disturbs less.",
        "",
    ]
    for dataset in DATASETS:
        lines += [
            f"**{dataset} messages**",
            "",
            "| store | wall per batch | msg/s | x floor (wall) | CPU per batch | x floor (CPU) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name in NAMES:
            cells = []
            for clock in (0, 1):
                us = statistics.median(run[(dataset, name)][clock] for run in results)
                ratios = _ratios(results, dataset, name, clock)
                each = ", ".join(f"{r:.2f}" for r in ratios)
                ratio = f"{statistics.median(ratios):.2f}x ({each})"
                cells += [f"{us / 1000:,.2f} ms"]
                if clock == 0:
                    cells += [f"{BATCH / us * 1e6:,.0f}"]
                cells += [ratio]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        wall = statistics.median(_ratios(results, dataset, SCRUB, 0))
        cpu = statistics.median(_ratios(results, dataset, SCRUB, 1))
        verdict = "met" if max(wall, cpu) <= TARGET else "NOT met"
        lines += [
            "",
            f"{SCRUB} / floor: {wall:.2f}x wall, {cpu:.2f}x CPU. Target {TARGET:g}x: {verdict}.",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run (a smoke test)")
    parser.add_argument("--runs", type=int, default=3, help="runs in a row (default 3)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds per run (default 9)")
    parser.add_argument("--size", type=int, default=1000, help="messages already stored")
    args = parser.parse_args(argv)
    runs, rounds, batches = (1, 2, 1) if args.quick else (args.runs, args.rounds, 4)
    with tempfile.TemporaryDirectory(prefix="chatlayers-scrub-") as tmp:
        results = anyio.run(measure, Path(tmp), args.size, rounds, batches, runs)
    sys.stdout.write(report(results, args.size, rounds) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
