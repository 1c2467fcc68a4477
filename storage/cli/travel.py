"""``chatlayers fork``, ``rewind`` and ``why``, and the as-of reads of ``show --as-of``.

``why --message ID`` prints the view a reply answered (:meth:`TimeTravelStorage.provenance`),
each message marked ``summary``, ``verbatim`` or ``trimmed``, and how many raw messages the
view left out (summarized, or before its window). Through a stack without a summarizing
layer, the model was given the record itself: there is no view to explain, and ``why`` says
so (exit 1) and points to ``show --as-of``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from storage.abilities import AsOf, TimeTravelStorage, ViewProvenance
from storage.cli.browse import require_ability
from storage.cli.commands import conversation_key, render_message
from storage.cli.conversation_file import DEFAULT_AGENT
from storage.cli.output import Output
from storage.cli.registry import command
from storage.cli.words import plural
from storage.config.stack import Stack
from storage.errors import ConfigError
from storage.history import safe_window
from storage.message import ChatKey, ChatMessage

__all__ = ["parse_as_of", "print_messages", "show_as_of"]

_BRIEF = 100  # characters of each message --brief shows


def parse_as_of(text: str) -> AsOf:
    """A ``--as-of`` value: digits are a store sequence number, an ISO-8601 time (a time
    without a zone is UTC) a moment, ``id:X`` (or anything else) the message id ``X``."""
    if text.startswith("id:"):
        return text[3:]
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _brief(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _BRIEF else line[: _BRIEF - 1] + "…"


def print_messages(
    out: Output, title: str, messages: Sequence[ChatMessage], labels: Sequence[str], brief: bool
) -> None:
    """``messages`` numbered, each with its label (role, kind): a rich table in a terminal,
    an indented transcript when piped; ``brief``: one line each."""
    texts = [render_message(m) for m in messages]
    if brief:
        texts = [_brief(t) for t in texts]
    if out.rich:
        out.table(
            title,
            ("#", "message", "content"),
            list(zip(range(len(texts)), labels, texts, strict=True)),
        )
        return
    out.text(title)
    for index, (label, text) in enumerate(zip(labels, texts, strict=True)):
        if brief:
            out.text(f"[{index}] {label}: {text}")
            continue
        out.text(f"[{index}] {label}")
        for line in text.splitlines() or [""]:
            out.text(f"    {line}")


def _key(args: argparse.Namespace) -> tuple[str | None, str, str | None]:
    return args.user, args.session, args.agent


async def _travel(stack: Stack, what: str, method: str) -> TimeTravelStorage:
    return require_ability(stack, TimeTravelStorage, what, method)


async def _cmd_fork(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    travel = await _travel(stack, "fork", "fork")
    key = await conversation_key(stack, *_key(args))
    new_key = ChatKey(key.user_id, args.to_session or key.session_id, args.to_agent or key.agent_id)
    copied = await travel.fork(key, new_key, at=args.at)
    if out.json_mode:
        out.json(
            {"source": _key_json(key), "fork": _key_json(new_key), "at": args.at, "copied": copied}
        )
        return 0
    where = f"up to message {args.at!r}" if args.at else "its whole record"
    out.text(f"forked {key} ({where}) into {new_key}: {plural(copied, 'message')} copied")
    return 0


async def _cmd_rewind(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    travel = await _travel(stack, "rewind", "rewind")
    key = await conversation_key(stack, *_key(args))
    hidden = await travel.rewind(key, args.to)
    if out.json_mode:
        out.json({**_key_json(key), "to": args.to, "hidden": hidden})
        return 0
    if not hidden:
        out.text(f"{key}: {args.to!r} is the newest message of the view; nothing to rewind")
        return 0
    out.text(
        f"rewound {key} to message {args.to!r}: {plural(hidden, 'message')} hidden from the "
        "view (kept in the record: show --as-of, fetch_all_chats, migrate; erased by delete)"
    )
    return 0


async def _cmd_why(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    travel = await _travel(stack, "why", "provenance")
    key = await conversation_key(stack, *_key(args))  # a missing store is said first
    if not _summarizing(stack):
        # Such a stack serves the record itself: no view was made, nothing to explain.
        raise ConfigError(
            "why explains the view a summarizing layer made for a reply, and this stack has "
            "none (summarize::...): the model was given the stored record itself, so there is "
            "nothing to explain; read it with `chatlayers show --session S --as-of id:REPLY_ID`"
        )
    timeline = await travel.fetch_timeline(key)
    reply_id = args.message
    if reply_id is None:  # the view's newest reply: one a rewind hid is not
        hidden = timeline.hidden_by()
        pairs = zip(timeline.seqs, timeline.messages, strict=True)
        replies = [m.id for seq, m in pairs if m.role == "assistant" and seq not in hidden]
        if not replies:
            raise ConfigError(f"{key} holds no assistant message in its view")
        reply_id = replies[-1]
    seq = timeline.seq_of(reply_id)
    if seq is None:
        raise ConfigError(f"no message {reply_id!r} in {key}")
    role = next((m.role for m in timeline.messages if m.id == reply_id), None)
    if role is not None and role != "assistant":
        raise ConfigError(f"message {reply_id!r} is a {role} message, not a reply")
    found = await travel.provenance(key, reply_id)
    if found is None:
        raise ConfigError(
            f"what the model was given for {reply_id!r} is not known: it was saved without a "
            "fetch through this stack's summarizing layer before it, or the view it answered "
            "is gone (a replace or a retention purge renumbered the record)"
        )
    return _view(args, out, key, found)


def _summarizing(stack: Stack) -> bool:
    from storage.layers.summarizing import SummarizingChatStorage

    return any(isinstance(c, SummarizingChatStorage) for c in stack.components())


def _key_json(key: ChatKey) -> dict[str, str]:
    return {"user_id": key.user_id, "session_id": key.session_id, "agent_id": key.agent_id}


def _message_json(message: ChatMessage, kind: str) -> dict[str, Any]:
    return {"kind": kind, "id": message.id, **message.to_openai()}


def _view(args: argparse.Namespace, out: Output, key: ChatKey, found: ViewProvenance) -> int:
    kinds = found.kinds
    if out.json_mode:
        out.json(
            {
                **_key_json(key),
                "reply": found.message_id,
                "served_at": found.served_at.isoformat(),
                "checkpoint_version": found.checkpoint_version,
                "covers_to": found.covers_to,
                "raw_to": found.raw_to,
                "limit": found.limit,
                "messages": [
                    _message_json(m, k) for m, k in zip(found.messages, kinds, strict=True)
                ],
                "omitted": [m.id for m in found.omitted],
            }
        )
        return 0
    served = found.served_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    title = (
        f"view that reply {found.message_id} of {key} answered: "
        f"{plural(len(found.messages), 'message')}, served {served}"
    )
    labels = [f"{kind} · {m.role}" for m, kind in zip(found.messages, kinds, strict=True)]
    print_messages(out, title, found.messages, labels, args.brief)
    counts = {kind: kinds.count(kind) for kind in ("summary", "verbatim", "trimmed")}
    source = (
        f"checkpoint version {found.checkpoint_version} (the record up to seq "
        f"{found.covers_to} summarized)"
        if found.checkpoint_version
        else "no checkpoint"
    )
    limit = f", limit {found.limit}" if found.limit is not None else ""
    out.text(
        f"{counts['summary']} summary, {counts['verbatim']} verbatim, {counts['trimmed']} "
        f"trimmed; {source}; raw record up to seq {found.raw_to}{limit}; "
        f"{plural(len(found.omitted), 'raw message')} left out (summarized or before the window)"
    )
    return 0


async def show_as_of(
    stack: Stack, key: ChatKey, at_text: str, limit: int | None
) -> tuple[list[ChatMessage], AsOf]:
    """The record of ``key`` as it stood at ``at_text`` (``show --as-of``), its newest
    ``limit`` when given (tool-pair safe)."""
    travel = require_ability(stack, TimeTravelStorage, "show --as-of", "fetch_as_of")
    at = parse_as_of(at_text)
    messages = await travel.fetch_as_of(key, at)
    if not messages and limit != 0:
        timeline = await travel.fetch_timeline(key)
        if timeline.messages:  # held nothing yet then: say where its record starts
            first = timeline.messages[0]
            when = f", at {first.created_at:%Y-%m-%dT%H:%M:%S}" if first.created_at else ""
            shown = at.isoformat() if isinstance(at, datetime) else repr(at)
            raise ConfigError(
                f"{key} held no messages as of {shown}: its first message is sequence number "
                f"{timeline.seqs[0]}{when} (id {first.id}); sequence numbers are the "
                "store's, which may count across conversations"
            )
    return safe_window(messages, limit), at


def _conversation_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", default=None, help="user id (found from the session when omitted)")
    p.add_argument("--session", required=True, help="session id")
    p.add_argument(
        "--agent",
        default=None,
        help=f"agent id (default: the session's only one, else {DEFAULT_AGENT})",
    )


def _fork_arguments(p: argparse.ArgumentParser) -> None:
    _conversation_arguments(p)
    p.add_argument("--to-session", default=None, help="the fork's session (default: the same)")
    p.add_argument("--to-agent", default=None, help="the fork's agent (default: the same)")
    p.add_argument(
        "--at", default=None, metavar="MESSAGE_ID", help="copy up to and including this message"
    )


def _rewind_arguments(p: argparse.ArgumentParser) -> None:
    _conversation_arguments(p)
    p.add_argument(
        "--to", required=True, metavar="MESSAGE_ID", help="the message to keep last in the view"
    )


def _why_arguments(p: argparse.ArgumentParser) -> None:
    _conversation_arguments(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--message", default=None, metavar="ID", help="the reply to explain")
    which.add_argument(
        "--last",
        action="store_true",
        help="explain the newest assistant message of the view (not one a rewind hid)",
    )
    p.add_argument("--brief", action="store_true", help="one line per message")


def _fork_check(args: argparse.Namespace) -> str | None:
    if args.to_session is None and args.to_agent is None:
        return "fork needs --to-session or --to-agent (the new conversation)"
    return None


command(
    "fork",
    help="copy a conversation (up to a message) into a new one of the same user",
    arguments=_fork_arguments,
    check=_fork_check,
    existing_store=True,
)(_cmd_fork)
command(
    "rewind",
    help="hide the messages after one from the view (kept in the record)",
    arguments=_rewind_arguments,
    existing_store=True,
)(_cmd_rewind)
command(
    "why",
    help="print the view a reply answered: summary, verbatim and trimmed messages",
    arguments=_why_arguments,
    read_only=True,
)(_cmd_why)
