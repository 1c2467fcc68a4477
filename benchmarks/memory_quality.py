"""``python -m benchmarks.memory_quality [--url STACK]... [--conversations N] [--tau N]``.

The quality measure of ``chatlayers eval`` (:mod:`storage.eval.measure`) on the shipped
tau-bench airline runs and on generated agent traffic (:mod:`benchmarks.traffic`), for each
stack (default: the token budget ``summarize?trigger_tokens=3000`` and the pair budget
``summarize?trigger_at=6``, both with the default summarizer, over fresh in-memory stores).
Prints a markdown table: per stack and set, the retention of the view, of truncation to the
same characters and of the newest messages matched to the view's count, view/raw tokens of
the summarized conversations, and summarizer calls. Offline; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import anyio

from benchmarks.data import DATA
from benchmarks.traffic import write_conversations
from storage.cli.conversation_file import read_conversations
from storage.eval.measure import DEFAULT_EVAL_URLS, EvalReport, evaluate_urls

TAU_BENCH = DATA / "tau_bench_airline_gpt4o_trial0.openai.jsonl"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def markdown(reports: list[EvalReport]) -> str:
    """The table, one row per stack and set."""
    lines = [
        "| stack | set | conversations (summarized) | points | facts | retention | "
        "truncation | last N | view/raw | summarizer calls | cleared / collapsed / trimmed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for report in reports:
        for name, f in report.sets.items():
            lines.append(
                f"| `{report.stack}` | {name} | {f.conversations} ({f.summarized}) | "
                f"{f.points} | {f.facts} | **{_ratio(f.retention)}** | "
                f"{_ratio(f.truncation_retention)} | {_ratio(f.last_n_retention)} | "
                f"{_ratio(f.view_ratio)} | {f.summarizer_calls} | "
                f"{f.clears_made} / {f.collapses_made} / {f.trims_made} |"
            )
    return "\n".join(lines)


async def measure(
    urls: list[str], generated: int, seed: int, directory: Path, tau: int | None = None
) -> list[EvalReport]:
    """Evaluate ``urls`` on the tau-bench runs (the first ``tau``; all by default) and
    ``generated`` generated conversations."""
    conversations = read_conversations([TAU_BENCH])[:tau]
    if generated:
        path = write_conversations(directory / "generated.openai.jsonl", generated, seed)
        conversations += read_conversations([path])
    return await evaluate_urls(urls, conversations)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.memory_quality", description=__doc__
    )
    parser.add_argument(
        "--url", action="append", help="stack URL to measure (repeat; default: two budgets)"
    )
    parser.add_argument(
        "--conversations", type=int, default=40, help="generated conversations (default 40)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated traffic")
    parser.add_argument("--tau", type=int, default=None, help="only the first N tau-bench runs")
    args = parser.parse_args(argv)
    urls = args.url or list(DEFAULT_EVAL_URLS)
    with tempfile.TemporaryDirectory(prefix="chatlayers-quality-") as tmp:
        reports = anyio.run(measure, urls, args.conversations, args.seed, Path(tmp), args.tau)
    print(markdown(reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
