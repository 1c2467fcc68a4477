"""``chatlayers eval FILE... [--url STACK]...``: how many needed facts each stack's view keeps.

Replays the conversations through each stack over a fresh store (:mod:`storage.eval.measure`)
and prints, per stack and per file: conversations (summarized), points (fetches whose view
was compacted), needed facts, the retention of the view, of truncation to the view's
characters and of the newest messages matched to the view's message count, raw and view
tokens, view/raw of the summarized conversations, summarizer calls, and the compactions made
with no summarizer call by each no-model step (cleared, collapsed, trimmed). Without ``--url`` it
measures :data:`storage.eval.measure.DEFAULT_EVAL_URLS` (a token and a pair budget);
``CHATLAYERS_URL`` and ``CHATLAYERS_CONFIG`` are not read (eval never touches a deployment's
store). ``--facts MODULE:CALLABLE`` replaces the fact extractor.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

from storage.cli.conversation_file import read_conversations
from storage.cli.output import Output
from storage.cli.registry import command
from storage.cli.words import plural
from storage.errors import ConfigError
from storage.eval.measure import (
    DEFAULT_EVAL_URLS,
    EvalReport,
    Figures,
    check_built,
    check_fresh,
    evaluate_urls,
)
from storage.facts import FactExtractor, extract_facts

__all__ = ["COLUMNS", "load_extractor", "replay_arguments", "report_rows"]

COLUMNS = (
    "stack",
    "set",
    "conversations",
    "summarized",
    "points",
    "facts",
    "retention",
    "truncation",
    "last N",
    "raw tokens",
    "view tokens",
    "view/raw",
    "summarizer calls",
    "cleared",
    "collapsed",
    "trimmed",
)
"""The columns of the table ``chatlayers eval`` prints."""


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _row(stack: str, name: str, figures: Figures) -> tuple[Any, ...]:
    return (
        stack,
        name,
        figures.conversations,
        figures.summarized,
        figures.points,
        figures.facts,
        _ratio(figures.retention),
        _ratio(figures.truncation_retention),
        _ratio(figures.last_n_retention),
        figures.raw_tokens,
        figures.view_tokens,
        _ratio(figures.view_ratio),
        figures.summarizer_calls,
        figures.clears_made,
        figures.collapses_made,
        figures.trims_made,
    )


def report_rows(reports: list[EvalReport]) -> list[tuple[Any, ...]]:
    """One row per stack and set (and a ``total`` row per stack measured on several sets)."""
    rows: list[tuple[Any, ...]] = []
    for report in reports:
        rows.extend(_row(report.stack, name, figures) for name, figures in report.sets.items())
        if len(report.sets) > 1:
            rows.append(_row(report.stack, "total", report.total))
    return rows


def _sources(args: argparse.Namespace) -> list[str | Path]:
    urls, configs = getattr(args, "url", None), getattr(args, "config", None)
    # Given before the command name, --url/--config is a single string.
    sources: list[str | Path] = [urls] if isinstance(urls, str) else list(urls or [])
    configs = [configs] if isinstance(configs, str) else list(configs or [])
    sources.extend(Path(c) for c in configs)
    return sources or list(DEFAULT_EVAL_URLS)


def load_extractor(name: str | None) -> FactExtractor:
    """The fact extractor ``module:callable`` names (default
    :func:`storage.eval.facts.extract_facts`).

    Raises:
        ConfigError: not ``module:callable``, the module cannot be imported, or the name is
            not a callable in it.
    """
    if not name:
        return extract_facts
    module_name, _, attribute = name.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"--facts must be MODULE:CALLABLE, got {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"--facts {name!r}: cannot import {module_name!r}: {exc}{_path_hint(module_name, exc)}"
        ) from exc
    found = getattr(module, attribute, None)
    if not callable(found):
        raise ConfigError(f"--facts {name!r}: {module_name} has no callable {attribute!r}")
    extractor: FactExtractor = found
    return extractor


def _path_hint(module_name: str, exc: ImportError) -> str:
    """Why a module beside the user may not import: the ``chatlayers`` command does not look
    in the current directory (a console script's ``sys.path`` starts at its own)."""
    top = module_name.split(".")[0]
    if not isinstance(exc, ModuleNotFoundError) or exc.name != top:
        return ""
    local = Path(*module_name.split("."))
    if local.with_suffix(".py").is_file() or (local / "__init__.py").is_file():
        here = local.with_suffix(".py") if local.with_suffix(".py").is_file() else local
        return f" ({here} is here, but not on the import path: run with PYTHONPATH=.)"
    return " (is its directory on PYTHONPATH?)"


async def _cmd_eval(args: argparse.Namespace, out: Output, stack: None) -> int:
    extractor = load_extractor(args.facts)
    conversations = read_conversations(args.files)
    sources = _sources(args)
    check_fresh(sources)
    await check_built(sources)
    total = sum(len(c.messages) for c in conversations) * len(sources)
    out.note(
        f"measuring {plural(len(sources), 'stack')} on "
        f"{plural(len(conversations), 'conversation')} (fresh stores, nothing is kept)"
    )
    with out.progress("replaying", total) as advance:
        reports = await evaluate_urls(
            sources, conversations, extractor=extractor, model=args.model, on_message=advance
        )
    if out.json_mode:
        out.json(
            [
                {
                    "stack": report.stack,
                    "token_model": args.model,
                    "sets": {name: f.as_dict() for name, f in report.sets.items()},
                    "total": report.total.as_dict(),
                }
                for report in reports
            ]
        )
        return 0
    out.table("chatlayers eval", COLUMNS, report_rows(reports))
    out.note(
        "retention: facts the next assistant message states that were said earlier, found in "
        "the view, at each fetch whose view was compacted; truncation: the system prompt + "
        "the newest messages in the view's characters; last N: as many messages as the view; "
        "cleared, collapsed, trimmed: compactions made by that step with no summarizer call"
    )
    return 0


def replay_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of a command that replays conversation files through fresh stacks
    (``eval``, ``diff``): the files, ``--model`` (tokenizer) and ``--facts`` (extractor)."""
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="JSONL (one conversation per line) or JSON list"
    )
    p.add_argument(
        "--model", default="gpt-4o", help="model whose tokenizer counts tokens (default gpt-4o)"
    )
    p.add_argument(
        "--facts",
        default=None,
        metavar="MODULE:CALLABLE",
        help="what counts as a fact for retention: a callable text -> set of str "
        "(default storage.eval.facts:extract_facts)",
    )


command(
    "eval",
    help="measure the facts each stack's model view keeps, beside truncation (fresh stores)",
    arguments=replay_arguments,
    needs_stack=False,
    many_stacks=True,
)(_cmd_eval)
