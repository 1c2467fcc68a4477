"""What the PII scrubber adds to a batch append, side by side with the SQLite floor.

    python -m benchmarks.scrub_cost [--quick] [--runs N] [--size N]

Three stores, the same ones and the same way ``python -m benchmarks`` measures its
``append_batch`` case (:mod:`benchmarks.subjects`, :func:`benchmarks.timing.interleaved`):
the floor (stdlib ``sqlite3``: ``json.dumps`` of each OpenAI dict, one ``executemany`` in
``BEGIN``/``COMMIT``), ``chatlayers sqlite`` and ``scrub::sqlite``
(``TransformingChatStorage(SQLite, PIIScrubber)``), each appending batches of 100 fresh messages
(in each round the same ones for all) to a conversation of ``--size`` messages; plus the
scrubber alone (the transform called on each message of the batch, no store). Two kinds of
messages, measured one after the other:

- ``shipped``: the real conversations of ``examples/data`` (tau-bench airline tool calls and
  JSON results, SWE-agent code and shell output, Open-Assistant prose), cycled;
- ``agent``: generated agent traffic (:mod:`benchmarks.agent_traffic`).

Each run is ``--rounds`` interleaved rounds in shuffled order; ``--runs`` runs in a row show
the spread on a shared machine. Cells: median ms per batch, messages per second and the ratio
to the floor of the same run. Target: ``scrub::sqlite`` within 4x the floor. Prints markdown.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import sys
import tempfile
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

# One run's result: (dataset, subject) -> median µs per batch.
Run = dict[tuple[str, str], float]


class _Fresh:
    """Fresh wire messages for each round, from a moving offset (like the suite's Source).
    Each contender has its own, so in every round all of them append the same messages."""

    def __init__(self, make: Callable[[int, int], list[Wire]]) -> None:
        self.make, self.offset = make, itertools.count(1000)

    def __call__(self, n: int) -> list[Wire]:
        return self.make(n, next(self.offset))


def _scrubber_alone(scrub: Any, source: _Fresh) -> tuple[Callable[[], Any], Any]:
    """The layer's transform over one batch, with the messages built before the round."""
    batches: list[list[ChatMessage]] = []
    key = chat_key("alone")

    async def prepare(calls: int) -> None:
        wires = source(calls * BATCH)
        batches[:] = [
            [ChatMessage.from_openai(w) for w in wires[i : i + BATCH]]
            for i in range(0, len(wires), BATCH)
        ]

    def op() -> None:
        for message in batches.pop():
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
            for s in subjects:
                await s.load(f"{dataset}{size}", make(size, 0))
            for run in results:
                contenders = []
                for s in subjects:
                    op, prepare = s.append_op(f"{dataset}{size}", BATCH, _Fresh(make))
                    contenders.append(Contender(s.name, op, s.is_async, prepare))
                op, prepare = _scrubber_alone(scrubbed.stack.transform, _Fresh(make))
                contenders.append(Contender(ALONE, op, False, prepare))
                await interleaved(
                    contenders, rounds=rounds, round_budget_s=0.05, max_calls=max_batches
                )
                for c in contenders:
                    run[(dataset, c.name)] = c.samples.median_us
    finally:
        for s in subjects:
            await s.close()
    return results


def report(results: list[Run], size: int, rounds: int) -> str:
    lines = [
        f"Batch append of {BATCH} messages to a conversation of {size:,}: median per batch, "
        f"messages/s and the ratio to the floor of the same run ({len(results)} runs of "
        f"{rounds} interleaved rounds; Python {platform.python_version()}, "
        f"{platform.machine()}).",
        "",
    ]
    for dataset in DATASETS:
        lines += [
            f"**{dataset} messages**",
            "",
            "| store | " + " | ".join(f"run {i + 1}" for i in range(len(results))) + " |",
            "|---|" + "---:|" * len(results),
        ]
        for name in NAMES:
            cells = []
            for run in results:
                us, floor = run[(dataset, name)], run[(dataset, FLOOR)]
                cells.append(
                    f"{us / 1000:,.2f} ms, {BATCH / us * 1e6:,.0f} msg/s ({us / floor:.2f}x)"
                )
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        ratios = [run[(dataset, SCRUB)] / run[(dataset, FLOOR)] for run in results]
        over_plain = [run[(dataset, SCRUB)] / run[(dataset, PLAIN)] for run in results]
        median = statistics.median(ratios)
        lines += [
            "",
            f"{SCRUB} / floor: median {median:.2f}x (runs: "
            + ", ".join(f"{r:.2f}x" for r in ratios)
            + f"); / {PLAIN}: median {statistics.median(over_plain):.2f}x. "
            + f"Target {TARGET:g}x: {'met' if median <= TARGET else 'NOT met'}.",
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
