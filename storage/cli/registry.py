"""Where ``chatlayers`` subcommands come from: a small registry other modules add to.

A command module registers its commands with the :func:`command` decorator; the parser
(:func:`storage.cli.build_parser`) imports every module named in
``storage.cli.COMMAND_MODULES`` and adds what they registered. Adding a command module is one
line in that tuple::

    @command("keys", help="create, rotate and inspect encryption keys", arguments=_arguments)
    async def _keys(args: argparse.Namespace, out: Output, stack: Stack) -> int: ...

``arguments(parser)`` adds the command's own flags (each with help text: a test walks the
parser); ``read_only`` commands never create a missing store (a SQLite file, a JSONL
directory) and make no summary (their summarizing layers are ``serve_only``);
``existing_store`` commands (they change only conversations already stored: ``fork``,
``rewind``, ``compact``, ``purge``) never create a missing store either, but may summarize;
``needs_stack=False``
commands are called with ``stack=None`` and open nothing; ``many_stacks`` commands (with
``needs_stack=False``) take ``--url``/``--config`` several times and get lists; ``check(args)``
returns a usage error's text (exit status 2, with the command's usage) or ``None``;
``failure_status`` is the exit status when the command fails with a ``ChatStorageError``
(1; 2 for commands whose 1 means "they differ", as ``diff(1)``'s does).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from storage.cli.output import Output
from storage.config.spec import StackSpec

_CREATED_ON_USE = frozenset({"sqlite", "jsonl"})
"""Stores that create a missing file or directory on use unless given ``create=False``."""

__all__ = ["Command", "Handler", "command", "existing_only", "registered"]

Handler = Callable[[argparse.Namespace, Output, Any], Awaitable[int]]


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def _no_check(args: argparse.Namespace) -> str | None:
    return None


@attrs.frozen
class Command:
    """One registered subcommand."""

    name: str
    help: str
    handler: Handler
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    read_only: bool = False
    needs_stack: bool = True
    many_stacks: bool = False
    check: Callable[[argparse.Namespace], str | None] = _no_check
    existing_store: bool = False
    failure_status: int = 1


_COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    *,
    help: str,
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments,
    read_only: bool = False,
    needs_stack: bool = True,
    many_stacks: bool = False,
    check: Callable[[argparse.Namespace], str | None] = _no_check,
    existing_store: bool = False,
    failure_status: int = 1,
) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine ``handler(args, out, stack) -> exit status`` as the
    subcommand ``name``.

    Raises:
        ValueError: ``name`` is registered already by another handler.
    """

    def register(handler: Handler) -> Handler:
        existing = _COMMANDS.get(name)
        if existing is not None and existing.handler is not handler:
            raise ValueError(f"chatlayers command {name!r} is registered twice")
        _COMMANDS[name] = Command(
            name,
            help,
            handler,
            arguments,
            read_only,
            needs_stack,
            many_stacks,
            check,
            existing_store,
            failure_status,
        )
        return handler

    return register


def registered() -> list[Command]:
    """Every registered command, in registration order."""
    return list(_COMMANDS.values())


def existing_only(spec: StackSpec) -> StackSpec:
    """``spec`` with a store that would create a missing file or directory (SQLite, JSONL)
    told not to (``create=False``): what a ``read_only`` or ``existing_store`` command opens,
    so a mistyped path is refused, never taken for an empty store."""
    if spec.store.name in _CREATED_ON_USE:
        spec.store.options.setdefault("create", False)
    return spec
