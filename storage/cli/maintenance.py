"""``chatlayers delete``, ``purge`` and ``compact``: erase and tidy stored conversations.

``delete`` and ``purge`` show what they would do with ``--dry-run`` and ask before deleting
more than one conversation unless ``--yes`` (with no terminal to ask they refuse).
"""

from __future__ import annotations

import argparse
import inspect
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from storage.abilities import ListableStorage, RetentionStorage
from storage.cli.browse import require_ability
from storage.cli.commands import conversation_key, store_label
from storage.cli.confirm import confirm
from storage.cli.conversation_file import DEFAULT_AGENT
from storage.cli.output import Output
from storage.cli.registry import command
from storage.cli.transfer import require_listable
from storage.cli.words import plural
from storage.config.stack import Stack
from storage.errors import ConfigError
from storage.message import ChatKey, check_key_part

__all__: list[str] = []


async def _targets(args: argparse.Namespace, stack: Stack) -> tuple[list[ChatKey], str]:
    """The conversations ``delete`` would erase, and what they are in words."""
    if args.session is not None and args.agent is not None:
        keys = [ChatKey(args.user, args.session, args.agent)]
        listable = _listable(stack)
        if listable is not None:
            stored = await listable.list_keys(args.user, args.session)
            keys = [k for k in stored if k.agent_id == args.agent]
        return keys, f"conversation {ChatKey(args.user, args.session, args.agent)}"
    keys = await require_listable(stack).list_keys(args.user, args.session)
    what = (
        f"session {args.session!r} of user {args.user!r}"
        if args.session is not None
        else f"user {args.user!r}"
    )
    return keys, what


async def _cmd_delete(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    check_key_part("user_id", args.user)
    if args.agent is not None and args.session is None:
        raise ConfigError("--agent needs --session: give both to delete one conversation")
    keys, what = await _targets(args, stack)
    if not keys:
        await _nothing_stored(args, stack, what)
    count = plural(len(keys), "conversation")
    if args.dry_run:
        if out.json_mode:
            out.json({"dry_run": True, "would_delete": what, "conversations": len(keys)})
        else:
            out.text(f"would delete {what} ({count}); nothing deleted (--dry-run)")
            for key in keys:
                out.text(f"  {key}")
        return 0
    if len(keys) > 1:
        confirm(f"delete {what} ({count})", yes=args.yes)
    if args.session is None:
        await stack.delete_user(args.user)
    elif args.agent is not None:
        await stack.delete(ChatKey(args.user, args.session, args.agent))
    else:
        for key in keys:
            await stack.delete(key)
    if out.json_mode:
        out.json({"deleted": what, "conversations": len(keys)})
    else:
        out.text(f"deleted {what} ({count})")
    return 0


async def _nothing_stored(args: argparse.Namespace, stack: Stack, what: str) -> NoReturn:
    """No conversation is listed: an error, as ``show`` of one that is not stored (exit 1).
    The erasure still runs (not for ``--dry-run``): it is idempotent, and it also reaches
    what a listing does not show, such as an encrypted user's data key."""
    if not args.dry_run:
        if args.session is None:
            await stack.delete_user(args.user)
        elif args.agent is not None:
            await stack.delete(ChatKey(args.user, args.session, args.agent))
    raise ConfigError(f"nothing is stored for {what}: nothing to delete")


def _listable(stack: Stack) -> ListableStorage | None:
    from storage.abilities import find_ability

    return find_ability(stack.inner, ListableStorage)


def _retention(stack: Stack) -> timedelta | None:
    return _timedelta(getattr(stack.base, "retention", None))


def _timedelta(value: object) -> timedelta | None:
    """A period given as a ``timedelta`` or seconds; ``None`` for anything else (none set)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    return None


def _duration(value: timedelta) -> str:
    """``30d``, ``12h``, ``90s``: a retention as the user would write it."""
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


async def _expired(stack: Stack, cutoff: datetime) -> tuple[int, int]:
    """``(messages, conversations)`` older than ``cutoff`` (a scan, for --dry-run)."""
    messages = conversations = 0
    base = stack.base
    for key in await require_listable(stack).list_keys():
        old = sum(1 for m in await base.fetch(key) if m.created_at and m.created_at < cutoff)
        messages += old
        conversations += bool(old)
    return messages, conversations


def _expires_by_ttl(stack: Stack) -> bool:
    """Whether the store's retention is a ``ttl`` its server applies itself (Redis: every key
    of a session expires ``ttl`` after the session's last write) instead of a ``retention``
    that ``purge`` applies."""
    return hasattr(stack.base, "ttl")


def _expired_by_server(args: argparse.Namespace, out: Output, stack: Stack, ttl: timedelta) -> int:
    """``purge`` on a store whose server expires conversations itself: nothing to do."""
    how = (
        f"{store_label(stack)} expires every key of a session on the server itself, "
        f"{_duration(ttl)} after the session's last write (its ttl)"
    )
    if out.json_mode:
        done = {"dry_run": True, "messages": 0} if args.dry_run else {"messages_deleted": 0}
        out.json({**done, "conversations": 0, "expires_after_seconds": ttl.total_seconds()})
    elif args.dry_run:
        out.text(f"would purge nothing: {how}; nothing deleted (--dry-run)")
    else:
        out.text(f"purged nothing: {how}")
    return 0


async def _cmd_purge(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    purger = require_ability(stack, RetentionStorage, "purge", "purge (a store retention)")
    retention = _retention(stack)
    if retention is None and _expires_by_ttl(stack):
        ttl = _timedelta(getattr(stack.base, "ttl", None))
        if ttl is None:
            raise ConfigError(
                f"purge deletes messages older than the store's retention, and "
                f"{store_label(stack)} has none: its server expires a session's keys a ttl "
                "after the session's last write instead (set ttl=..., e.g. ?ttl=30d)"
            )
        if not args.dry_run:
            await purger.purge()  # 0: the server expires sessions (as from Python)
        return _expired_by_server(args, out, stack, ttl)
    if retention is None:
        raise ConfigError(
            f"purge deletes messages older than the store's retention, and "
            f"{store_label(stack)} has none (set retention=..., e.g. ?retention=30d)"
        )
    now = datetime.now(UTC)
    messages, conversations = await _expired(stack, now - retention)
    summary = (
        f"{plural(messages, 'message')} older than {_duration(retention)} "
        f"in {plural(conversations, 'conversation')}"
    )
    if args.dry_run:
        if out.json_mode:
            out.json({"dry_run": True, "messages": messages, "conversations": conversations})
        else:
            out.text(f"would purge {summary}; nothing deleted (--dry-run)")
        return 0
    if conversations > 1:
        confirm(f"purge {summary}", yes=args.yes)
    deleted = await purger.purge(now=now)
    if out.json_mode:
        out.json({"messages_deleted": deleted, "conversations": conversations})
    else:
        out.text(f"purged {plural(deleted, 'message')} older than {_duration(retention)}")
    return 0


def _compacting_layer(stack: Stack) -> Any:
    """The outermost component with a ``compact(key, summary=...)`` method (a summarizing
    layer), found by walking ``.inner``."""
    for component in stack.components():
        method = getattr(component, "compact", None)
        if callable(method) and inspect.iscoroutinefunction(method):
            return component
    return None


async def _cmd_compact(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    key_parts = (args.user, args.session, args.agent)
    if any(part is not None for part in key_parts) or args.summary is not None:
        if args.session is None:
            raise ConfigError("compact one conversation: give --session (and --user, --agent)")
        key = await conversation_key(stack, args.user, args.session, args.agent)
        layer = _compacting_layer(stack)
        if layer is None:
            raise ConfigError(
                "compacting a conversation needs a summarizing layer (summarize::...); "
                f"this stack is {' | '.join(stack.describe().splitlines())}"
            )
        view = await layer.compact(key, summary=args.summary)
        size = len(view) if isinstance(view, list) else None
        raw = len(await stack.base.fetch(key))
        if out.json_mode:
            out.json({"compacted": str(key), "view_messages": size, "raw_messages": raw})
        else:
            how = "with the given summary" if args.summary is not None else "by the summarizer"
            shown = plural(size, "message") if size is not None else "?"
            out.text(
                f"compacted {key} {how}: the model view is now {shown} "
                f"(the raw record keeps {plural(raw, 'message')})"
            )
        return 0
    return await _repair_jsonl(out, stack)


async def _repair_jsonl(out: Output, stack: Stack) -> int:
    compact = getattr(stack.base, "compact_all", None)
    if not callable(compact):
        raise ConfigError(
            f"compact (without --user/--session) rewrites a jsonl store's files; this stack's "
            f"store is {store_label(stack)}"
        )
    results = await compact()
    files = list(results) if isinstance(results, list | tuple) else []
    totals = {
        field: sum(int(getattr(r, field, 0) or 0) for r in files)
        for field in ("kept", "dropped", "bytes_before", "bytes_after")
    }
    if out.json_mode:
        out.json({"store": store_label(stack), "files_compacted": len(files), **totals})
    else:
        out.text(
            f"compacted {plural(len(files), 'file')} of {store_label(stack)}: "
            f"{plural(totals['dropped'], 'line')} dropped, {totals['kept']:,} kept, "
            f"{totals['bytes_before']:,} -> {totals['bytes_after']:,} bytes"
        )
    return 0


def _confirm_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dry-run", action="store_true", help="say what would be deleted; delete nothing"
    )
    p.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="do not ask before deleting more than one conversation (needed without a terminal)",
    )


def _delete_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", required=True, help="the user to erase (alone: every conversation)")
    p.add_argument("--session", default=None, help="only this session (all its agents)")
    p.add_argument("--agent", default=None, help="only this agent of --session: one conversation")
    _confirm_arguments(p)


def _compact_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--user", default=None, help="user of the conversation (default: the session's only one)"
    )
    p.add_argument("--session", default=None, help="session of the conversation to compact now")
    p.add_argument(
        "--agent",
        default=None,
        help=f"agent of the conversation (default: the session's only one, else {DEFAULT_AGENT})",
    )
    p.add_argument(
        "--summary",
        default=None,
        metavar="TEXT",
        help="use TEXT as the summary instead of calling the summarizer",
    )


command(
    "delete",
    help="erase a user, one session (--session) or one conversation (--session --agent)",
    arguments=_delete_arguments,
    read_only=True,
)(_cmd_delete)
command(
    "purge",
    help="delete messages older than the store's retention",
    arguments=_confirm_arguments,
    existing_store=True,
)(_cmd_purge)
command(
    "compact",
    help="summarize one conversation now (--user --session), or rewrite a JSONL store's files",
    arguments=_compact_arguments,
    existing_store=True,
)(_cmd_compact)
