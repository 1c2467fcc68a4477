"""The ``chatlayers`` command: replay real conversations through a stack, inspect and move data.

Commands (each takes ``--url URL`` or ``--config FILE`` to choose the stack, default
``CHATLAYERS_URL`` / ``CHATLAYERS_CONFIG`` / ``summarize::scrub::sqlite:///chatlayers.db``,
and ``--json`` for machine output)::

    chatlayers replay FILE...      save conversations turn by turn, fetch like an orchestrator
    chatlayers show --session S    what the model would see (or --raw: the stored record)
    chatlayers stack               the composed stack, outermost first
    chatlayers export [-o FILE]    JSONL, one conversation per line (OpenAI format + key)
    chatlayers import FILE         validated first, refused whole on the first bad line
    chatlayers stats               users, sessions, agents, messages, bytes
    chatlayers delete --user U     erase a user (or one conversation with --session/--agent)
    chatlayers compact             compact a JSONL store's files

This package's ``__init__`` parses the arguments, runs the command and renders its result;
the work itself is in :mod:`storage.cli.replay` and :mod:`storage.cli.transfer`, the file
format (read by ``replay`` and ``import``, written by ``export``) in
:mod:`storage.cli.conversation_file`, and the rendering primitives (rich in a terminal, plain
text when piped, JSON with ``--json``) in :mod:`storage.cli.output`.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import attrs

from storage.abilities import ListableStorage, find_ability
from storage.cli.conversation_file import DEFAULT_AGENT, conversation_record, read_conversations
from storage.cli.output import Output
from storage.cli.replay import replay as replay_conversations
from storage.cli.transfer import (
    collect_stats,
    export_conversations,
    import_conversations,
    require_listable,
)
from storage.config import open_storage
from storage.config.loading import to_spec
from storage.config.stack import Stack, describe_lines
from storage.errors import ChatStorageError, ConfigError
from storage.message import ChatKey, ChatMessage, check_key_part
from storage.redact import redact_url

__all__ = ["build_parser", "main"]


def _store_label(stack: Stack) -> str:
    return describe_lines(stack)[-1]


def _database(stack: Stack) -> str:
    """Where the data lives: the absolute file path of a file store, else the store's line."""
    base = stack.base
    path = getattr(base, "path", None)
    if isinstance(path, str | os.PathLike) and str(path) != ":memory:":
        return os.path.abspath(path)
    return _store_label(stack)


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.2f} ms"


def _render_message(message: ChatMessage) -> str:
    parts = []
    if message.text or message.content is not None:
        parts.append(message.text)
    for call in message.tool_calls:
        parts.append(f"→ {call.name}({call.arguments})  [{call.id}]")
    if message.role == "tool" and message.tool_call_id:
        parts.insert(0, f"[result of {message.tool_call_id}]")
    if message.content is None and not message.tool_calls:
        parts.append("(no content)")
    return "\n".join(p for p in parts if p)


# --- commands -------------------------------------------------------------------------------


async def _cmd_replay(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    conversations = read_conversations(args.files)
    total = sum(len(c.messages) for c in conversations)
    database = _database(stack)
    out.note(f"replaying {len(conversations)} conversations ({total} messages) into {database}")
    with out.progress("replaying", total) as advance:
        report = await replay_conversations(
            stack,
            conversations,
            fresh=args.fresh,
            fetch_limit=args.fetch_limit,
            model=args.model,
            on_message=advance,
        )
    p50, p99 = report.percentile(0.50), report.percentile(0.99)
    if out.json_mode:
        out.json(
            {
                "database": database,
                "stack": stack.describe().splitlines(),
                "conversations": report.conversations,
                "messages_read": report.messages_read,
                "messages_stored": report.messages_stored,
                "messages_already_stored": report.messages_skipped,
                "pii_found": dict(sorted(report.pii.items())) if report.scrubbing else None,
                "summaries_made": report.summaries_made if report.summarizing else None,
                "raw": {"messages": report.raw_messages, "tokens": report.raw_tokens},
                "model_view": {"messages": report.view_messages, "tokens": report.view_tokens},
                "token_model": args.model,
                "fetches": len(report.fetch_seconds),
                "fetch_p50_ms": None if p50 is None else p50 * 1e3,
                "fetch_p99_ms": None if p99 is None else p99 * 1e3,
            }
        )
        return 0
    pii_total = sum(report.pii.values())
    rows: list[tuple[str, Any]] = [
        ("database", database),
        ("conversations", report.conversations),
        ("messages stored", report.messages_stored),
        ("messages already stored", report.messages_skipped),
        ("PII found", pii_total if report.scrubbing else "no scrub layer"),
    ]
    rows += [(f"  {entity}", n) for entity, n in sorted(report.pii.items())]
    rows += [
        ("summaries made", report.summaries_made if report.summarizing else "no summarize layer"),
        ("raw history (messages)", report.raw_messages),
        ("model view (messages)", report.view_messages),
        (f"raw history (tokens, {args.model})", _tokens(report.raw_tokens)),
        (f"model view (tokens, {args.model})", _tokens(report.view_tokens)),
        ("fetches", len(report.fetch_seconds)),
        ("fetch p50", _ms(p50)),
        ("fetch p99", _ms(p99)),
    ]
    out.table("chatlayers replay", ("", "value"), rows, show_header=False)
    out.note(
        f"The stored conversations are in {database}; chat history can hold personal data "
        "(erase a user with `chatlayers delete --user ID`)."
    )
    return 0


def _tokens(count: int | None) -> int | str:
    return "n/a (pip install 'chatlayers[llm]')" if count is None else count


async def _cmd_show(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    user_id = args.user
    if user_id is None:
        keys = await require_listable(stack).list_keys(None, args.session)
        if not keys:
            raise ConfigError(f"no conversation is stored in session {args.session!r}")
        users = sorted({k.user_id for k in keys if k.agent_id == args.agent})
        if not users:
            agents = ", ".join(sorted({repr(k.agent_id) for k in keys}))
            raise ConfigError(
                f"session {args.session!r} has no agent {args.agent!r}; its agents: {agents}"
            )
        if len(users) > 1:
            found = ", ".join(repr(u) for u in users)
            raise ConfigError(
                f"--user is needed: session {args.session!r} (agent {args.agent!r}) has "
                f"several users: {found}"
            )
        user_id = users[0]
    key = ChatKey(user_id, args.session, args.agent)
    source = stack.base if args.raw else stack
    messages = await source.fetch(key, limit=args.limit)
    view = "raw" if args.raw else "model"
    if out.json_mode:
        out.json({"view": view, **conversation_record(key, messages)})
        return 0
    if not messages:
        out.note(f"no messages stored for {key}")
        return 0
    rows = []
    for index, message in enumerate(messages):
        role = message.role + (" (summary)" if message.is_summary else "")
        rows.append((index, role, _render_message(message)))
    title = f"{'raw record' if args.raw else 'model view'} of {key}: {len(messages)} messages"
    if out.rich:
        out.table(title, ("#", "role", "content"), rows)
    else:
        out.text(title)
        for index, role, text in rows:
            out.text(f"[{index}] {role}")
            for line in text.splitlines() or [""]:
                out.text(f"    {line}")
    return 0


async def _cmd_stack(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    lines = stack.describe().splitlines()
    if out.json_mode:
        out.json({"source": stack.source, "components": lines, "database": _database(stack)})
        return 0
    out.table(
        f"stack from {stack.source} (outermost first)",
        ("#", "component"),
        [(i, line) for i, line in enumerate(lines, 1)],
    )
    return 0


async def _cmd_export(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    if args.output in (None, "-"):
        conversations, messages = await export_conversations(
            stack, out.out, user_id=args.user, session_id=args.session
        )
        out.note(f"exported {conversations} conversations ({messages} messages)")
        return 0
    target = Path(args.output)
    tmp = target.with_name(target.name + ".partial")
    with tmp.open("w", encoding="utf-8") as fh:
        conversations, messages = await export_conversations(
            stack, fh, user_id=args.user, session_id=args.session
        )
    tmp.replace(target)
    if out.json_mode:
        out.json({"file": str(target), "conversations": conversations, "messages": messages})
    else:
        out.text(f"exported {conversations} conversations ({messages} messages) to {target}")
    return 0


async def _cmd_import(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    conversations = read_conversations([args.file])  # everything validated before any write
    with out.progress("importing", len(conversations)) as advance:
        stored, skipped = await import_conversations(stack, conversations, on_conversation=advance)
    if out.json_mode:
        out.json(
            {
                "conversations": len(conversations),
                "messages_stored": stored,
                "messages_already_stored": skipped,
            }
        )
    else:
        out.text(
            f"imported {len(conversations)} conversations: {stored} messages stored, "
            f"{skipped} already present"
        )
    return 0


async def _cmd_stats(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    stats = await collect_stats(stack, user_id=args.user)
    data = attrs.asdict(stats)
    if out.json_mode:
        out.json({"database": _database(stack), **data})
        return 0
    rows = [("database", _database(stack)), *data.items()]
    out.table("chatlayers stats", ("", "value"), rows, show_header=False)
    return 0


async def _cmd_delete(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    check_key_part("user_id", args.user)
    if (args.session is None) != (args.agent is None):
        raise ConfigError("give both --session and --agent to delete one conversation")
    listable = find_ability(stack, ListableStorage)
    before: int | None = None
    if listable is not None:
        keys = await listable.list_keys(args.user, args.session)
        if args.agent is not None:
            keys = [k for k in keys if k.agent_id == args.agent]
        before = len(keys)
    if args.session is not None:
        await stack.delete(ChatKey(args.user, args.session, args.agent))
        what = f"conversation {ChatKey(args.user, args.session, args.agent)}"
    else:
        await stack.delete_user(args.user)
        what = f"user {args.user!r}"
    if out.json_mode:
        out.json({"deleted": what, "conversations": before})
    else:
        suffix = f" ({before} conversations)" if before is not None else ""
        out.text(f"deleted {what}{suffix}")
    return 0


async def _cmd_compact(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    compact = getattr(stack.base, "compact_all", None)
    if not callable(compact):
        raise ConfigError(
            f"compact works on a jsonl store; this stack's store is {_store_label(stack)}"
        )
    results = await compact()
    files = list(results) if isinstance(results, list | tuple) else []
    totals = {
        field: sum(int(getattr(r, field, 0) or 0) for r in files)
        for field in ("kept", "dropped", "bytes_before", "bytes_after")
    }
    if out.json_mode:
        out.json({"store": _store_label(stack), "files_compacted": len(files), **totals})
    else:
        out.text(
            f"compacted {len(files)} files of {_store_label(stack)}: {totals['dropped']} lines "
            f"dropped, {totals['kept']} kept, {totals['bytes_before']} -> "
            f"{totals['bytes_after']} bytes"
        )
    return 0


# --- argument parsing -----------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    default = None if top else argparse.SUPPRESS
    group = parser.add_argument_group("stack selection")
    group.add_argument(
        "--url", default=default, help="stack URL chain, e.g. summarize::scrub::sqlite:///chats.db"
    )
    group.add_argument(
        "--config", default=default, metavar="FILE", help="TOML or JSON stack config file"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="machine-readable JSON output",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``chatlayers`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="chatlayers",
        description=(
            "Store, inspect and move LLM conversation histories. The stack comes from --url, "
            "--config, CHATLAYERS_URL, CHATLAYERS_CONFIG, else "
            "summarize::scrub::sqlite:///chatlayers.db (a file in the working directory)."
        ),
    )
    _common(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Any, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        _common(sub, top=False)
        sub.set_defaults(handler=handler)
        return sub

    p = command("replay", _cmd_replay, "replay conversation files through the stack, turn by turn")
    p.add_argument(
        "files", nargs="+", metavar="FILE", help="JSONL (one conversation per line) or JSON list"
    )
    p.add_argument("--fresh", action="store_true", help="delete each replayed conversation first")
    p.add_argument(
        "--fetch-limit",
        type=int,
        default=None,
        metavar="N",
        help="fetch at most N messages, as an orchestrator with a window would",
    )
    p.add_argument(
        "--model", default="gpt-4o", help="model whose tokenizer counts tokens (default gpt-4o)"
    )

    p = command("show", _cmd_show, "print what the model would see for a conversation (or --raw)")
    p.add_argument("--user", default=None, help="user id (found from the session when omitted)")
    p.add_argument("--session", required=True, help="session id")
    p.add_argument("--agent", default=DEFAULT_AGENT, help=f"agent id (default {DEFAULT_AGENT})")
    p.add_argument("--raw", action="store_true", help="the stored record, not the model view")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="at most N newest messages")

    command("stack", _cmd_stack, "print the composed stack, outermost first, secrets redacted")

    p = command("export", _cmd_export, "write stored conversations as JSONL (OpenAI format + key)")
    p.add_argument("--user", default=None, help="only this user")
    p.add_argument("--session", default=None, help="only this session")
    p.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="write to FILE (default stdout)"
    )

    p = command("import", _cmd_import, "import a JSONL export (validated whole before writing)")
    p.add_argument("file", metavar="FILE")

    p = command("stats", _cmd_stats, "count users, sessions, agents, messages and bytes")
    p.add_argument("--user", default=None, help="only this user")

    p = command(
        "delete", _cmd_delete, "erase a user's conversations (or one with --session/--agent)"
    )
    p.add_argument("--user", required=True)
    p.add_argument("--session", default=None)
    p.add_argument("--agent", default=None)

    command("compact", _cmd_compact, "compact a JSONL store's files")
    return parser


# Commands that only read: they must not create an empty SQLite file at a mistyped path.
_READ_ONLY = frozenset({"show", "stats", "export", "delete"})


def _open(args: argparse.Namespace) -> Stack:
    url, config = getattr(args, "url", None), getattr(args, "config", None)
    if url and config:
        raise ConfigError("give --url or --config, not both")
    spec = to_spec(url or (Path(config) if config else None))
    if args.command in _READ_ONLY and spec.store.name == "sqlite":
        spec.store.options.setdefault("create", False)
    return open_storage(spec)


async def _run(args: argparse.Namespace, out: Output) -> int:
    stack = _open(args)
    async with stack:
        code: int = await args.handler(args, out, stack)
        return code


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    sys.stderr.write(f"chatlayers: warning: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``chatlayers`` command; return the exit status (0 ok, 1 error, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Output(json_mode=bool(getattr(args, "json", False)))
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning  # one readable line, no source excerpt
            return anyio.run(_run, args, out)
    except ChatStorageError as exc:
        sys.stderr.write(f"chatlayers: error: {redact_url(str(exc))}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("chatlayers: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as Unix tools do. Point stdout at
        # devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
