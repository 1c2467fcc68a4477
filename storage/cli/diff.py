"""``chatlayers diff FILE... --url A --url B``: two stacks on the same conversations (a canary).

Replays every conversation through both stacks, each over a fresh store, with the quality
measure of ``chatlayers eval`` (:mod:`storage.eval.diff`), and prints per conversation and
per stack: tokens of the final view, summarizer calls, PII found, fact retention, and where
the views first differ (the first fetch whose view differs and the message index in it). A
second table gives the PII found by entity. Exit status 0 when every view was equal, 1 when
some differ (or on an error), 2 for a usage error (not exactly two stacks). ``--config FILE``
may stand for either stack; ``CHATLAYERS_URL`` and ``CHATLAYERS_CONFIG`` are not read.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from storage.cli.conversation_file import read_conversations
from storage.cli.eval import load_extractor, replay_arguments
from storage.cli.output import Output
from storage.cli.registry import command
from storage.cli.words import plural
from storage.eval.diff import ConversationDiff, DiffReport, StackRun, diff_urls
from storage.eval.measure import Figures, check_built, check_fresh

__all__ = ["COLUMNS", "report_json", "report_rows"]

COLUMNS = (
    "conversation",
    "view tokens A",
    "view tokens B",
    "calls A",
    "calls B",
    "PII A",
    "PII B",
    "retention A",
    "retention B",
    "first difference",
)
"""The columns of the table ``chatlayers diff`` prints."""


def _sources(args: argparse.Namespace) -> list[str | Path]:
    urls, configs = getattr(args, "url", None), getattr(args, "config", None)
    # Given before the command name, --url/--config is a single string.
    sources: list[str | Path] = [urls] if isinstance(urls, str) else list(urls or [])
    configs = [configs] if isinstance(configs, str) else list(configs or [])
    sources.extend(Path(c) for c in configs)
    return sources


def _check(args: argparse.Namespace) -> str | None:
    count = len(_sources(args))
    if count != 2:
        return f"diff compares exactly two stacks (--url A --url B, or --config), got {count}"
    return None


def _retention(figures: Figures) -> str:
    value = figures.retention
    return "n/a" if value is None else f"{value:.3f}"


def _row(name: str, a: StackRun, b: StackRun, difference: str) -> tuple[Any, ...]:
    return (
        name,
        a.figures.view_tokens,
        b.figures.view_tokens,
        a.figures.summarizer_calls,
        b.figures.summarizer_calls,
        sum(a.pii.values()),
        sum(b.pii.values()),
        _retention(a.figures),
        _retention(b.figures),
        difference,
    )


def report_rows(report: DiffReport) -> list[tuple[Any, ...]]:
    """One row per conversation and a ``total`` row (its last column: how many differ)."""
    rows = [
        _row(
            c.conversation,
            c.runs[0],
            c.runs[1],
            "equal" if c.difference is None else c.difference.text(),
        )
        for c in report.conversations
    ]
    (fa, pa), (fb, pb) = report.totals(0), report.totals(1)
    differing = sum(not c.equal for c in report.conversations)
    rows.append(
        _row(
            "total",
            StackRun(fa, pa),
            StackRun(fb, pb),
            f"{differing} of {plural(len(report.conversations), 'conversation')} differ",
        )
    )
    return rows


def _conversation_json(c: ConversationDiff) -> dict[str, Any]:
    return {
        "conversation": c.conversation,
        "where": c.where,
        "equal": c.equal,
        "A": c.runs[0].as_dict(),
        "B": c.runs[1].as_dict(),
        "first_difference": None if c.difference is None else c.difference.as_dict(),
    }


def report_json(report: DiffReport, model: str) -> dict[str, Any]:
    """The whole report as plain JSON values."""
    totals = {}
    for which, label in enumerate("AB"):
        figures, pii = report.totals(which)
        totals[label] = figures.as_dict() | {"pii": dict(sorted(pii.items()))}
    return {
        "stacks": {"A": report.stacks[0], "B": report.stacks[1]},
        "token_model": model,
        "equal": report.equal,
        "differing": sum(not c.equal for c in report.conversations),
        "conversations": [_conversation_json(c) for c in report.conversations],
        "total": totals,
    }


async def _cmd_diff(args: argparse.Namespace, out: Output, stack: None) -> int:
    extractor = load_extractor(args.facts)
    conversations = read_conversations(args.files)
    first, second = _sources(args)
    check_fresh((first, second), command="diff")
    await check_built((first, second), command="diff")
    out.note(
        f"comparing 2 stacks on {plural(len(conversations), 'conversation')} "
        "(fresh stores, nothing is kept)"
    )
    total = sum(len(c.messages) for c in conversations) * 2
    with out.progress("replaying", total) as advance:
        report = await diff_urls(
            (first, second),
            conversations,
            extractor=extractor,
            model=args.model,
            on_message=advance,
        )
    if out.json_mode:
        out.json(report_json(report, args.model))
    else:
        out.table("chatlayers diff", COLUMNS, report_rows(report))
        (_, pii_a), (_, pii_b) = report.totals(0), report.totals(1)
        entities = sorted(set(pii_a) | set(pii_b))
        if entities:
            rows = [(e, pii_a.get(e, 0), pii_b.get(e, 0)) for e in entities]
            out.table("PII found by entity", ("entity", "A", "B"), rows)
        out.note(f"A = {report.stacks[0]}\nB = {report.stacks[1]}")
        out.note(
            "views are compared as the model gets them (role, content, tool calls), at every "
            "fetch before an assistant message and at the end; retention: the eval measure"
        )
    return 0 if report.equal else 1


command(
    "diff",
    help="replay conversations through two stacks (fresh stores) and compare their views; "
    "exit 1 when they differ",
    arguments=replay_arguments,
    needs_stack=False,
    many_stacks=True,
    failure_status=2,
    check=_check,
)(_cmd_diff)
