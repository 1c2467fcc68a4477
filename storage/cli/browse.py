"""``chatlayers sessions`` and ``chatlayers search``: find a user's conversations."""

from __future__ import annotations

import argparse
from typing import TypeVar

from storage.abilities import (
    Abilities,
    SearchableStorage,
    SessionInfo,
    SessionListing,
    find_ability,
)
from storage.cli.output import Output
from storage.cli.registry import command
from storage.cli.words import plural
from storage.config.stack import Stack, describe_lines
from storage.errors import ConfigError
from storage.message import check_key_part

__all__ = ["require_ability"]

A = TypeVar("A")


def require_ability(stack: Stack, ability: type[A], what: str, method: str) -> A:
    """``stack`` as ``ability``, found through every layer.

    Raises:
        ConfigError: some component lacks it (the stack's store and the method are named).
    """
    found = find_ability(stack.inner if isinstance(stack, Stack) else stack, ability)
    if found is None:
        lines = describe_lines(stack)
        missing = [
            f"{line} {_why_not(component, ability)}"
            for line, component in zip(lines, stack.components(), strict=False)
            if not isinstance(component, ability)
        ]
        hiding = [line for line in missing if line.endswith(_HIDES)]
        missing = hiding or missing  # the layers above only lack what a hiding one took
        raise ConfigError(
            f"{what} needs {ability.__name__}.{method}(), which this stack does not offer: "
            f"{'; '.join(missing) or lines[-1] + ' does not implement it'}"
        )
    return found


_HIDES = "hides it (its declaration: it cannot offer it over what it stores)"


def _why_not(component: object, ability: type) -> str:
    """Why ``component`` lacks ``ability``: a layer's declaration says whether it hides it on
    purpose (an encrypting layer cannot search ciphertext)."""
    declared = getattr(type(component), "abilities", None)
    if isinstance(declared, Abilities) and declared.offers(ability) is False:
        return _HIDES
    return "does not implement it"


def _time(value: object) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if hasattr(value, "strftime") else str(value)


async def _cmd_sessions(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    check_key_part("user_id", args.user)
    listing = require_ability(stack, SessionListing, "sessions", "list_sessions")
    sessions: list[SessionInfo] = []
    cursor = args.cursor
    while True:
        page = await listing.list_sessions(args.user, limit=args.limit, cursor=cursor)
        sessions.extend(page.sessions)
        cursor = page.next_cursor
        if not args.all or cursor is None:
            break
    if out.json_mode:
        out.json(
            {
                "user_id": args.user,
                "sessions": [
                    {
                        "session_id": s.session_id,
                        "agents": list(s.agents),
                        "message_count": s.message_count,
                        "first_at": s.first_at.isoformat(),
                        "last_at": s.last_at.isoformat(),
                    }
                    for s in sessions
                ],
                "next_cursor": cursor,
            }
        )
        return 0
    rows = [
        (s.session_id, ", ".join(s.agents), s.message_count, _time(s.first_at), _time(s.last_at))
        for s in sessions
    ]
    title = f"{plural(len(sessions), 'session')} of user {args.user!r}, newest activity first"
    out.table(title, ("session", "agents", "messages", "first (UTC)", "last (UTC)"), rows)
    if cursor is not None:
        out.note(f"more sessions: --cursor {cursor} (or --all)")
    return 0


async def _cmd_search(args: argparse.Namespace, out: Output, stack: Stack) -> int:
    check_key_part("user_id", args.user)
    searchable = require_ability(stack, SearchableStorage, "search", "search")
    hits = await searchable.search(args.user, args.query, limit=args.limit)
    if out.json_mode:
        out.json(
            {
                "user_id": args.user,
                "query": args.query,
                "hits": [
                    {
                        "session_id": h.key.session_id,
                        "agent_id": h.key.agent_id,
                        "message_id": h.message.id,
                        "role": h.message.role,
                        "created_at": h.message.created_at,
                        "snippet": h.snippet,
                        "score": h.score,
                    }
                    for h in hits
                ],
            }
        )
        return 0
    rows = [
        (h.key.session_id, h.key.agent_id, h.message.role, _time(h.message.created_at), h.snippet)
        for h in hits
    ]
    title = f"{plural(len(hits), 'hit')} for {args.query!r} in user {args.user!r}, best first"
    out.table(title, ("session", "agent", "role", "time (UTC)", "snippet"), rows)
    return 0


def _sessions_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", required=True, help="the user whose sessions to list")
    p.add_argument(
        "--limit", type=int, default=50, metavar="N", help="sessions per page (default 50)"
    )
    p.add_argument(
        "--cursor", default=None, help="continue after a page (the cursor the last page printed)"
    )
    p.add_argument("--all", action="store_true", help="follow the cursors: every session")


def _search_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", required=True, help="search this user's messages only")
    p.add_argument("query", metavar="QUERY", help="words to find (in the stored, scrubbed text)")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="at most N hits (default 20)")


command(
    "sessions",
    help="list a user's sessions, newest activity first",
    arguments=_sessions_arguments,
    read_only=True,
)(_cmd_sessions)
command(
    "search",
    help="search a user's stored messages, best first",
    arguments=_search_arguments,
    read_only=True,
)(_cmd_search)
