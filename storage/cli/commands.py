"""The built-in ``chatlayers`` commands that replay, inspect and move data.

Registered with :func:`storage.cli.registry.command`; the erasing and upkeep commands are in
:mod:`storage.cli.maintenance`, listing and search in :mod:`storage.cli.browse`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import attrs

from storage.abilities import ListableStorage, find_ability
from storage.cli.conversation_file import DEFAULT_AGENT, conversation_record, read_conversations
from storage.cli.output import Output
from storage.cli.registry import command
from storage.cli.replay import REPLAY_URL
from storage.cli.replay import replay as replay_conversations
from storage.cli.transfer import (
    collect_stats,
    export_conversations,
    import_conversations,
    record_reader,
    require_listable,
)
from storage.cli.words import duration, plural
from storage.config.stack import Stack, describe_lines
from storage.errors import ConfigError
from storage.message import ChatKey, ChatMessage

__all__ = ["conversation_key", "database", "render_message", "store_label"]


def store_label(stack: Stack) -> str:
    return describe_lines(stack)[-1]


def database(stack: Stack) -> str:
    """Where the data lives: the absolute file path of a file store, else the store's line."""
    base = stack.base
    path = getattr(base, "path", None)
    if isinstance(path, str | os.PathLike) and str(path) != ":memory:":
        return os.path.abspath(path)
    return store_label(stack)


def render_message(message: ChatMessage) -> str:
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
    location = database(stack)
    out.note(
        f"replaying {plural(len(conversations), 'conversation')} "
        f"({plural(total, 'message')}) into {location}"
    )
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
                "database": location,
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
                "summarizer_calls": report.summarizer_calls if report.summarizing else None,
                "saves": dict(report.save_rows()),
                "sets": [
                    dict(
                        zip(
                            (
                                "set",
                                "conversations",
                                "summarized",
                                "raw_tokens",
                                "view_tokens",
                                "summarizer_calls",
                            ),
                            row,
                            strict=True,
                        )
                    )
                    for row in report.set_rows()
                ],
            }
        )
        return 0
    pii_total = sum(report.pii.values())
    rows: list[tuple[str, Any]] = [
        ("database", location),
        ("conversations", report.conversations),
        ("messages stored", report.messages_stored),
        ("messages already stored", report.messages_skipped),
        ("PII found", pii_total if report.scrubbing else "no scrub layer"),
    ]
    rows += [(f"  {entity}", n) for entity, n in sorted(report.pii.items())]
    rows += [
        ("summaries made", report.summaries_made if report.summarizing else "no summarize layer"),
        ("summarizer calls", report.summarizer_calls if report.summarizing else "-"),
        ("raw history (messages)", report.raw_messages),
        ("model view (messages)", report.view_messages),
        (f"raw history (tokens, {args.model})", _tokens(report.raw_tokens)),
        (f"model view (tokens, {args.model})", _tokens(report.view_tokens)),
        ("fetches", len(report.fetch_seconds)),
        ("fetch p50", duration(p50)),
        ("fetch p99", duration(p99)),
        *report.save_rows(),
    ]
    out.table("chatlayers replay", ("", "value"), rows, show_header=False)
    if report.sets:
        out.table(
            "per set",
            ("set", "conversations", "summarized", "raw tokens", "view tokens", "summarizer calls"),
            report.set_rows(),
        )
    out.note(
        f"The stored conversations are in {location}; chat history can hold personal data "
        "(erase a user with `chatlayers delete --user ID`)."
    )
    return 0


def _tokens(count: int | None) -> int | str:
    return "n/a (pip install 'chatlayers[llm]')" if count is None else count


async def conversation_key(
    stack: Stack, user_id: str | None, session_id: str, agent_id: str | None
) -> ChatKey:
    """The key of a conversation named on the command line: ``agent_id`` (``None``: the
    session's only agent, else ``assistant``) and ``user_id`` (``None``: found from the
    session) from the stack's key listing.

    Raises:
        ConfigError: the session holds no conversation, not that agent, or several users'.
    """
    keys = None  # listed once, for both
    if agent_id is None:
        listable = find_ability(stack, ListableStorage)
        keys = await listable.list_keys(user_id, session_id) if listable is not None else None
        agents = {k.agent_id for k in keys or ()}
        agent_id = agents.pop() if len(agents) == 1 else DEFAULT_AGENT
    if user_id is None:
        if keys is None:
            keys = await require_listable(stack).list_keys(None, session_id)
        if not keys:
            raise ConfigError(f"no conversation is stored in session {session_id!r}")
        users = sorted({k.user_id for k in keys if k.agent_id == agent_id})
        if not users:
            agents_found = ", ".join(sorted({repr(k.agent_id) for k in keys}))
            raise ConfigError(
                f"session {session_id!r} has no agent {agent_id!r}; its agents: {agents_found}"
            )
        if len(users) > 1:
            found = ", ".join(repr(u) for u in users)
            raise ConfigError(
                f"--user is needed: session {session_id!r} (agent {agent_id!r}) has "
                f"several users: {found}"
            )
        user_id = users[0]
    return ChatKey(user_id, session_id, agent_id)


async def _cmd_show(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    key = await conversation_key(stack, args.user, args.session, args.agent)
    if args.as_of is not None:
        from storage.cli.travel import show_as_of

        messages, at = await show_as_of(stack, key, args.as_of, args.limit)
        view, view_name = "as_of", f"record as of {at}"
        if out.json_mode:
            out.json({"view": view, "as_of": str(at), **conversation_record(key, messages)})
            return 0
        return _print_view(out, key, messages, view_name, args.limit, ids=args.ids)
    source = record_reader(stack) if args.raw else stack
    messages = await source.fetch(key, limit=args.limit)
    view = "raw" if args.raw else "model"
    if out.json_mode:
        out.json({"view": view, **conversation_record(key, messages)})
        return 0
    view_name = "raw record" if args.raw else "model view"
    return _print_view(out, key, messages, view_name, args.limit, ids=args.ids)


def _print_view(
    out: Output,
    key: ChatKey,
    messages: list[ChatMessage],
    view_name: str,
    limit: int | None,
    *,
    ids: bool = False,
) -> int:
    if not messages:
        if limit == 0:
            out.note("--limit 0: no message asked for")
            return 0
        # As when the session itself is unknown (found without --user): an error, exit 1.
        raise ConfigError(f"no messages stored for {key}")
    rows = []
    for index, message in enumerate(messages):
        role = message.role + (" (summary)" if message.is_summary else "")
        rows.append((index, role, message.id, render_message(message)))
    title = f"{view_name} of {key}: {plural(len(messages), 'message')}"
    if out.rich:
        if ids:
            out.table(title, ("#", "role", "id", "content"), rows)
        else:
            out.table(title, ("#", "role", "content"), [(i, r, t) for i, r, _, t in rows])
    else:
        out.text(title)
        for index, role, message_id, text in rows:
            out.text(f"[{index}] {role}" + (f"  id={message_id}" if ids else ""))
            for line in text.splitlines() or [""]:
                out.text(f"    {line}")
    return 0


async def _cmd_stack(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    lines = stack.describe().splitlines()
    if out.json_mode:
        out.json({"source": stack.source, "components": lines, "database": database(stack)})
        return 0
    out.table(
        f"stack from {stack.source} (outermost first)",
        ("#", "component"),
        [(i, line) for i, line in enumerate(lines, 1)],
    )
    return 0


async def _cmd_export(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    # jsonl and json move data (import reads both): the raw record; md is for reading.
    raw = args.raw if args.raw is not None else args.format != "md"
    options: dict[str, Any] = {
        "user_id": args.user,
        "session_id": args.session,
        "format": args.format,
        "raw": raw,
    }
    view = "raw record" if raw else "model view"
    if args.output in (None, "-"):
        conversations, messages = await export_conversations(stack, out.out, **options)
        out.note(
            f"exported {plural(conversations, 'conversation')} "
            f"({plural(messages, 'message')}, {view})"
        )
        return 0
    target = Path(args.output)
    tmp = target.with_name(target.name + ".partial")
    with tmp.open("w", encoding="utf-8") as fh:
        conversations, messages = await export_conversations(stack, fh, **options)
    tmp.replace(target)
    if out.json_mode:
        out.json(
            {
                "file": str(target),
                "format": args.format,
                "view": "raw" if raw else "model",
                "conversations": conversations,
                "messages": messages,
            }
        )
    else:
        out.text(
            f"exported {plural(conversations, 'conversation')} "
            f"({plural(messages, 'message')}, {view}) to {target}"
        )
    return 0


async def _cmd_import(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    # Everything is validated before any write.
    conversations = read_conversations([args.file], system=args.system)
    # A conversation left empty (it held only the stripped system message) is not imported.
    emptied = sum(1 for c in conversations if not c.messages)
    conversations = [c for c in conversations if c.messages]
    with out.progress("importing", len(conversations)) as advance:
        stored, skipped = await import_conversations(stack, conversations, on_conversation=advance)
    if out.json_mode:
        out.json(
            {
                "conversations": len(conversations),
                "conversations_left_empty": emptied,
                "messages_stored": stored,
                "messages_already_stored": skipped,
            }
        )
    else:
        out.text(
            f"imported {plural(len(conversations), 'conversation')}: "
            f"{plural(stored, 'message')} stored, {skipped:,} already present"
            + (
                f"; {plural(emptied, 'conversation')} left empty by --system strip"
                if emptied
                else ""
            )
        )
    return 0


async def _cmd_stats(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    stats = await collect_stats(stack, user_id=args.user)
    data = attrs.asdict(stats)
    if out.json_mode:
        out.json({"database": database(stack), **data})
        return 0
    rows = [("database", database(stack)), *data.items()]
    out.table("chatlayers stats", ("", "value"), rows, show_header=False)
    return 0


# --- registration ---------------------------------------------------------------------------


def _replay_arguments(p: argparse.ArgumentParser) -> None:
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
    # Without --url/--config/environment, replay runs agent traffic through a token budget.
    p.set_defaults(default_url=REPLAY_URL)


def _show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", default=None, help="user id (found from the session when omitted)")
    p.add_argument("--session", required=True, help="session id")
    p.add_argument(
        "--agent",
        default=None,
        help=f"agent id (default: the session's only one, else {DEFAULT_AGENT})",
    )
    p.add_argument("--raw", action="store_true", help="the stored record, not the model view")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="at most N newest messages")
    p.add_argument(
        "--as-of",
        default=None,
        metavar="AT",
        help="the record as it stood then: a sequence number, a message id (id:X to be "
        "sure) or an ISO-8601 time (UTC when it has no zone)",
    )
    p.add_argument(
        "--ids",
        action="store_true",
        help="print each message's id (what rewind --to, fork --at, why --message and "
        "--as-of id:X take)",
    )


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", default=None, help="only this user")
    p.add_argument("--session", default=None, help="only this session")
    p.add_argument(
        "--format",
        choices=("jsonl", "json", "md"),
        default="jsonl",
        help="jsonl: one conversation per line (what import reads); json: one indented "
        "document per conversation, in a list; md: a readable Markdown transcript",
    )
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--raw",
        action="store_true",
        default=None,
        help="the stored record (the default for jsonl and json, which import reads)",
    )
    view.add_argument(
        "--model-view",
        dest="raw",
        action="store_false",
        help="what the model sees: a summarizing stack's view (the default for md)",
    )
    p.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="write to FILE (default stdout)"
    )


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a chatlayers export (JSONL or a JSON list)")
    p.add_argument(
        "--system",
        choices=("keep", "strip"),
        default="keep",
        help="keep a leading system message (default) or strip it, so a restored history "
        "does not repeat the agent's own instructions",
    )


def _stats_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", default=None, help="only this user")


command(
    "replay",
    help="replay conversation files through the stack, turn by turn",
    arguments=_replay_arguments,
)(_cmd_replay)
command(
    "show",
    help="print what the model would see for a conversation (or --raw)",
    arguments=_show_arguments,
    read_only=True,
)(_cmd_show)
command("stack", help="print the composed stack, outermost first, secrets redacted")(_cmd_stack)
command(
    "export",
    help="write stored conversations as JSONL, JSON or Markdown",
    arguments=_export_arguments,
    read_only=True,
)(_cmd_export)
command(
    "import",
    help="import a JSONL or JSON export (validated whole before writing)",
    arguments=_import_arguments,
)(_cmd_import)
command(
    "stats",
    help="count users, sessions, agents, messages and bytes",
    arguments=_stats_arguments,
    read_only=True,
)(_cmd_stats)
