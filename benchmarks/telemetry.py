"""What telemetry costs: the hook with nobody listening, and the ``otel`` layer switched on.

    python -m benchmarks.telemetry [--quick]

Over ``summarize::scrub::sqlite`` with an active (summarized) conversation of 200 messages,
interleaved (:mod:`benchmarks.timing`), medians in µs:

- the hook alone: ``recorder()`` and ``span(...)`` with no recorder (what every instrumented
  spot of a layer costs when telemetry is off);
- ``fetch`` (the view served from memory after one head read) and ``save`` of the stack
  without the ``otel`` layer, with it over OpenTelemetry's API alone (no SDK configured: spans
  are not recorded), and with it over the SDK (spans recorded into an in-memory exporter,
  metrics into an in-memory reader).

Prints markdown.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from benchmarks.data import history
from benchmarks.timing import Contender, interleaved
from storage import ChatKey, ChatMessage, open_storage
from storage.config import Stack
from storage.telemetry import recorder, span

KEY = ChatKey("bench", "telemetry", "agent")


def _sdk() -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer = TracerProvider()
    exporter = InMemorySpanExporter()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer, MeterProvider(metric_readers=[InMemoryMetricReader()])


async def measure(rounds: int, workdir: Path) -> dict[str, float]:
    layers = [{"type": "summarize", "trigger_at": 20, "keep_last": 2}, {"type": "scrub"}]
    tracer, meter = _sdk()
    stacks: dict[str, Stack] = {}
    for name, top in (
        ("off", []),
        ("otel, API only", [{"type": "otel", "secret": "s"}]),
        (
            "otel, SDK",
            [{"type": "otel", "secret": "s", "tracer_provider": tracer, "meter_provider": meter}],
        ),
    ):
        url = f"sqlite:///{workdir / (name.replace(' ', '_').replace(',', '') + '.db')}"
        stack = open_storage({"store": {"url": url}, "layers": [*top, *layers]})
        await stack.__aenter__()
        await stack.save_messages(KEY, [ChatMessage.from_openai(w) for w in history(200)])
        await stack.fetch(KEY)  # summarized: the view is served from memory from now on
        stacks[name] = stack
    counter = itertools.count()

    def fetcher(stack: Stack) -> Callable[[], Awaitable[list[ChatMessage]]]:
        async def fetch() -> list[ChatMessage]:
            return await stack.fetch(KEY)

        return fetch

    def saver(stack: Any) -> Any:
        async def save() -> None:
            n = next(counter)
            await stack.save(KEY, ChatMessage("user", f"question {n}: mail me at a{n}@x.org"))

        return save

    def off_span() -> None:
        with span("compaction", KEY, trigger="save"):
            pass

    contenders = [
        Contender("recorder() (off)", recorder, False),
        Contender("span(...) (off)", off_span, False),
    ]
    for name, stack in stacks.items():
        contenders.append(Contender(f"fetch, {name}", fetcher(stack), True))
    for name, stack in stacks.items():
        contenders.append(Contender(f"save, {name}", saver(stack), True))
    await interleaved(contenders, rounds=rounds, round_budget_s=0.02, max_calls=400)
    for stack in stacks.values():
        await stack.aclose()
    return {c.name: c.samples.median_us for c in contenders}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.telemetry", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run (seconds)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="chatlayers-telemetry-") as tmp:
        costs = anyio.run(measure, 3 if args.quick else 15, Path(tmp))
    print("## Telemetry cost (summarize::scrub::sqlite, an active view of 200 messages)\n")
    print(f"{platform.python_implementation()} {platform.python_version()}, medians in µs\n")
    print("| operation | median (µs) |")
    print("|---|---:|")
    for name, value in costs.items():
        print(f"| {name} | {value:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
