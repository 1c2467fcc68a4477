"""What background summarizing saves the user's turn, and the replay table of the
shipped sets with a token budget.

    python -m benchmarks.background [--quick] [--delay SECONDS]

Part 1, over SQLite: a summarizer that takes ``--delay`` seconds (default 2; the extractive
summary behind an ``anyio.sleep``), ``trigger_at=20``. For ``inline`` and ``background``:
the median of plain saves, the save that crosses the threshold, and how long until the summary
is in the view. Target: the crossing save in background mode about as fast as a plain save.

Part 2: ``chatlayers replay`` of every ``examples/data/*.openai.jsonl`` through
``summarize?trigger_tokens=4000::scrub::sqlite`` (:data:`storage.cli.replay.REPLAY_URL`,
extractive summarizer), inline and background: per set, raw vs view tokens and summarizer
calls; then the cost of a plain save and of a save that triggered a summary.
Prints markdown.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from storage import open_storage
from storage.cli.conversation_file import read_conversations
from storage.cli.replay import ReplayReport, replay
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage
from summarizers.extractive import ExtractiveSummarizer

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
KEY = ChatKey("bench", "background", "agent")


class Slow:
    """The extractive summarizer behind a delay (a model call's latency)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.inner = ExtractiveSummarizer()

    async def __call__(self, buffer: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        await anyio.sleep(self.delay)
        return await self.inner(buffer, keep_last)


def turn(n: int) -> list[ChatMessage]:
    return [
        ChatMessage("user", f"Question {n}: can you change my flight to Friday?"),
        ChatMessage("assistant", f"Answer {n}: done, your booking is on Friday now."),
    ]


async def crossing(background: bool, delay: float, directory: str) -> tuple[float, float, float]:
    """(plain save p50, crossing save, summary ready after) in seconds."""
    store = SQLiteChatStorage(os.path.join(directory, f"bg-{background}.db"))
    layer = SummarizingChatStorage(store, Slow(delay), trigger_at=20, background=background)
    perf = time.perf_counter
    async with layer:
        await layer.fetch(KEY)
        plain: list[float] = []
        messages = [m for n in range(20) for m in turn(n)]  # 40: at the trigger
        for message in messages:
            start = perf()
            await layer.save(KEY, message)
            plain.append(perf() - start)
        start = perf()
        await layer.save(KEY, ChatMessage("user", "One more question."))  # 41 > 40
        crossed = perf() - start
        await layer.drain()
        ready = perf() - start
        view = await layer.fetch(KEY)
        assert view[0].is_summary, "the summary is in the view"
    return statistics.median(plain), crossed, ready


async def replay_sets(background: bool, directory: str) -> ReplayReport:
    files = sorted(str(p) for p in DATA.glob("*.openai.jsonl"))
    conversations = read_conversations(files)
    db = os.path.join(directory, f"replay-{background}.db")
    flag = "&background=true" if background else ""
    os.environ.setdefault("CHATLAYERS_PII_SECRET", "benchmark-secret-0123456789abcdef")
    async with open_storage(f"summarize?trigger_tokens=4000{flag}::scrub::sqlite:///{db}") as st:
        return await replay(st, conversations, fresh=True)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


async def main(args: argparse.Namespace) -> None:
    print(f"# Background summarizing ({platform.machine()}, Python {sys.version.split()[0]})\n")
    with tempfile.TemporaryDirectory() as directory:
        print(f"Summarizer delay {args.delay} s, trigger_at=20, SQLite.\n")
        print("| mode | plain save p50 | crossing save | summary in the view after |")
        print("|---|---|---|---|")
        for background in (False, True):
            plain, crossed, ready = await crossing(background, args.delay, directory)
            mode = "background" if background else "inline"
            print(f"| {mode} | {ms(plain)} | {ms(crossed)} | {ms(ready)} |")
        if args.quick:
            return
        print("\n## Replay of the shipped sets, trigger_tokens=4000 (extractive)\n")
        reports = {bg: await replay_sets(bg, directory) for bg in (False, True)}
        inline = reports[False]
        print("| set | conversations | summarized | raw tokens | view tokens | summarizer calls |")
        print("|---|---|---|---|---|---|")
        for row in inline.set_rows():
            print("| " + " | ".join(str(cell) for cell in row) + " |")
        print("\n| save | inline | background |")
        print("|---|---|---|")
        rows = {bg: dict(r.save_rows()) for bg, r in reports.items()}
        labels = [label.replace(" (inline)", "") for label in rows[False]]
        for label, (a, b) in zip(
            labels, zip(rows[False].values(), rows[True].values(), strict=True), strict=True
        ):
            print(f"| {label} | {a} | {b} |")
        calls = {bg: r.summarizer_calls for bg, r in reports.items()}
        print(f"\nsummarizer calls: inline {calls[False]}, background {calls[True]}")


def run() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.background")
    parser.add_argument("--quick", action="store_true", help="part 1 only")
    parser.add_argument("--delay", type=float, default=2.0, help="summarizer delay in seconds")
    anyio.run(main, parser.parse_args())


if __name__ == "__main__":
    run()
