"""``chatlayers migrate`` and ``chatlayers verify``: move a deployment to another store.

``migrate --from URL --to URL`` copies every conversation (ids, order, times, records, the
summary checkpoint with ``covers_to`` remapped), resumable after a kill and idempotent
(:func:`storage.migrate.migrate`); it also repairs what a ``mirror`` layer whose secondary
is ``--to`` recorded as missed. ``verify --from URL --to URL`` compares key by key and
exits 1 naming the first difference (:func:`storage.migrate.verify`); ``--views`` also
compares what the model sees through both stacks, their stored summaries served as they are
(verify makes no summary and writes nothing to either store).
``--from``/``--to`` take a URL chain or a TOML/JSON config file; ``CHATLAYERS_URL`` and
``CHATLAYERS_CONFIG`` are not read (a migration names both ends).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import Any

from storage.cli.output import Output
from storage.cli.registry import command, existing_only
from storage.config import open_storage
from storage.config.loading import to_spec
from storage.config.stack import Stack, describe_lines
from storage.errors import ConfigError
from storage.message import ChatKey
from storage.migrate import MigrationReport, VerifyReport, migrate, verify
from storage.redact import redact_url

__all__ = ["migration_rows", "verify_rows"]

COLUMNS = ("", "keys", "messages", "checkpoints", "records", "seconds")


def _stack(value: str, *, read_only: bool) -> Stack:
    spec = to_spec(value)
    return open_storage(existing_only(spec) if read_only else spec)


def _ends(args: argparse.Namespace) -> tuple[str, str]:
    if getattr(args, "url", None) or getattr(args, "config", None):
        raise ConfigError(f"{args.command} takes --from and --to (not --url or --config)")
    return args.source, args.target


def migration_rows(report: MigrationReport) -> list[tuple[Any, ...]]:
    """The rows of the table ``chatlayers migrate`` prints."""
    return [
        ("in the source", report.keys, report.messages, report.checkpoints, report.records, None),
        (
            "copied",
            report.keys_changed,
            report.messages_copied,
            report.checkpoints_copied,
            report.records_copied,
            round(report.seconds, 3),
        ),
    ]


def verify_rows(report: VerifyReport) -> list[tuple[Any, ...]]:
    """The rows of the table ``chatlayers verify`` prints."""
    return [
        (
            "compared",
            report.keys,
            report.messages,
            report.checkpoints,
            report.records,
            round(report.seconds, 3),
        )
    ]


class _Progress:
    """A progress bar whose total is known only once the keys are listed."""

    def __init__(self, out: Output, description: str, exits: contextlib.ExitStack) -> None:
        self._out, self._description, self._exits = out, description, exits
        self._advance: Callable[[], None] = lambda: None

    def start(self, total: int) -> None:
        self._advance = self._exits.enter_context(self._out.progress(self._description, total))

    def advance(self, *_: object) -> None:
        self._advance()


async def _cmd_migrate(args: argparse.Namespace, out: Output, stack: None) -> int:
    source_url, target_url = _ends(args)
    if args.batch < 1:
        raise ConfigError(f"--batch must be >= 1, got {args.batch}")
    with contextlib.ExitStack() as exits:
        progress = _Progress(out, "migrating", exits)
        async with (
            _stack(source_url, read_only=True) as source,
            _stack(target_url, read_only=False) as target,
        ):
            out.note(f"migrating {describe_lines(source)[-1]} -> {describe_lines(target)[-1]}")
            report = await migrate(
                source,
                target,
                journal=redact_url(target_url),
                batch=args.batch,
                on_keys=progress.start,
                on_key=progress.advance,
            )
    if out.json_mode:
        out.json(report.as_dict())
        return 1 if report.busy else 0
    out.table("chatlayers migrate", COLUMNS, migration_rows(report))
    extra = []
    if report.rewritten:
        extra.append(f"{report.rewritten:,} rewritten (the target had diverged)")
    if report.deleted:
        extra.append(f"{report.deleted:,} deleted from the target (gone from the source)")
    if report.marks_repaired:
        extra.append(f"{report.marks_repaired:,} writes a mirror missed repaired")
    if extra:
        out.note("; ".join(extra))
    ends = f"--from {redact_url(source_url)!r} --to {redact_url(target_url)!r}"
    if report.busy:
        out.text(_busy_text(report.busy))
        return 1
    out.note(f"check it: chatlayers verify {ends}")
    return 0


def _busy_text(busy: list[ChatKey]) -> str:
    shown = ", ".join(str(key) for key in busy[:3]) + (" …" if len(busy) > 3 else "")
    return (
        f"not copied: {len(busy):,} conversations written all through the copy's attempts "
        f"({shown}); a mirror writing them copies each on its next write there (they are "
        "marked for it), or run migrate again when they are quieter"
    )


async def _cmd_verify(args: argparse.Namespace, out: Output, stack: None) -> int:
    source_url, target_url = _ends(args)
    with contextlib.ExitStack() as exits:
        progress = _Progress(out, "verifying", exits)
        async with (
            _stack(source_url, read_only=True) as source,
            _stack(target_url, read_only=True) as target,
        ):
            report = await verify(
                source, target, views=args.views, on_keys=progress.start, on_key=progress.advance
            )
    if out.json_mode:
        out.json(report.as_dict())
        return 0 if report.equal else 1
    out.table("chatlayers verify", COLUMNS, verify_rows(report))
    if args.views:
        out.text(
            f"views compared: {report.views:,}, {report.summarized_views:,} of them with a "
            "stored summary (served as stored: verify makes no summary and writes nothing)"
        )
    if report.difference is not None:
        out.text(f"different: {report.difference}")
        return 1
    out.text("equal")
    return 0


def _ends_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="URL",
        help="the stack to read: a URL chain or a TOML/JSON config file",
    )
    p.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="URL",
        help="the other stack: a URL chain or a TOML/JSON config file",
    )


def _migrate_arguments(p: argparse.ArgumentParser) -> None:
    _ends_arguments(p)
    p.add_argument(
        "--batch",
        type=int,
        default=500,
        metavar="N",
        help="messages per atomic batch written to the target (default 500)",
    )


def _verify_arguments(p: argparse.ArgumentParser) -> None:
    _ends_arguments(p)
    p.add_argument(
        "--views",
        action="store_true",
        help="also compare what the model sees through both stacks (fetch every "
        "conversation; stored summaries are served as they are, none is made)",
    )


command(
    "migrate",
    help="copy every conversation (ids, order, records, summary checkpoints) to another "
    "store; resumable and idempotent",
    arguments=_migrate_arguments,
    needs_stack=False,
)(_cmd_migrate)
command(
    "verify",
    help="compare two stores key by key; exit 1 naming the first difference (2: could not compare)",
    arguments=_verify_arguments,
    needs_stack=False,
    failure_status=2,
)(_cmd_verify)
