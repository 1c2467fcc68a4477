"""The ``chatlayers`` command: replay real conversations through a stack, inspect and move data.

Commands (each takes ``--url URL`` or ``--config FILE`` to choose the stack, default
``CHATLAYERS_URL`` / ``CHATLAYERS_CONFIG`` / ``summarize::scrub::sqlite:///chatlayers.db``,
and ``--json`` for machine output)::

    chatlayers replay FILE...        save conversations turn by turn, fetch like an orchestrator
    chatlayers show --session S      what the model would see (--raw: the stored record,
                                     --as-of AT: the record as it stood then)
    chatlayers stack                 the composed stack, outermost first
    chatlayers sessions --user U     a user's sessions, newest activity first
    chatlayers search --user U WORDS a user's messages matching WORDS, best first
    chatlayers export [--format F]   JSONL (what import reads), JSON documents, or Markdown
    chatlayers import FILE           validated first, refused whole on the first bad line
    chatlayers stats                 users, sessions, agents, messages, bytes
    chatlayers delete --user U       erase a user, a session, or one conversation
    chatlayers purge                 delete messages older than the store's retention
    chatlayers compact               summarize one conversation now, or tidy JSONL files
    chatlayers keys new|init|rotate|status|accept   master keys and the keyring of the encrypt
                                     layer (keys never printed back)
    chatlayers eval FILE...          fact retention of stacks' views vs truncation, fresh stores
    chatlayers migrate --from A --to B  copy every conversation (checkpoints too), resumable
    chatlayers verify --from A --to B   compare key by key, exit 1 at the first difference
    chatlayers diff FILE... --url A --url B   two stacks on the same conversations (canary)
    chatlayers fork --session S ...  copy a conversation (up to a message) into a new one
    chatlayers rewind --session S --to ID   hide the messages after one (kept in the record)
    chatlayers why --message ID      the view a reply answered: summary, verbatim, trimmed

This package's ``__init__`` builds the parser from the commands registered by the modules
in :data:`COMMAND_MODULES` (:mod:`storage.cli.registry`; a new command module is one line
there), runs the chosen command and maps errors to exit statuses.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NoReturn, TextIO

import anyio

from storage.cli.output import Output
from storage.cli.registry import existing_only, registered
from storage.config import open_storage
from storage.config.loading import ENV_CONFIG, ENV_URL, to_spec
from storage.config.stack import Stack, components
from storage.errors import ChatStorageError, ConfigError
from storage.redact import redact_url
from storage.telemetry import operation

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES: Final = (
    "storage.cli.commands",
    "storage.cli.browse",
    "storage.cli.maintenance",
    "storage.cli.keys",
    "storage.cli.eval",
    "storage.cli.migrate",
    "storage.cli.diff",
    "storage.cli.travel",
)
"""Modules whose :func:`storage.cli.registry.command` registrations make the subcommands."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors name a mistyped flag's closest match ("did you mean")
    and show the usage of the subcommand the flag was given to."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def known_flags(self) -> list[str]:
        return [flag for action in self._actions for flag in action.option_strings]

    def suggestion(self, token: str) -> str | None:
        """The known flag closest to an unknown flag ``token`` (``--usr`` -> ``--user``)."""
        flag = token.split("=", 1)[0]
        known = self.known_flags()
        if not flag.startswith("-") or flag == "-" or flag in known:
            return None
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        return close[0] if close else None

    def describe_unknown(self, tokens: Sequence[str]) -> list[str]:
        """``--usr (did you mean --user?)`` for each unknown flag of ``tokens`` with a match."""
        out = []
        for token in tokens:
            close = self.suggestion(token)
            if close is not None:
                out.append(f"{token.split('=', 1)[0]} (did you mean {close}?)")
        return out

    def error(self, message: str) -> NoReturn:
        unknown = self.describe_unknown(getattr(self, "_given", []))
        if unknown and "unrecognized arguments" not in message:
            message = f"{message}; unrecognized: {', '.join(unknown)}"
        super().error(message)


def _common(parser: argparse.ArgumentParser, *, top: bool, many: bool = False) -> None:
    default = None if top else argparse.SUPPRESS
    group = parser.add_argument_group("stack selection")
    action = "append" if many else "store"
    again = " (repeat for several stacks)" if many else ""
    group.add_argument(
        "--url",
        default=default,
        action=action,
        help=f"stack URL chain, e.g. summarize::scrub::sqlite:///chats.db{again}",
    )
    group.add_argument(
        "--config",
        default=default,
        action=action,
        metavar="FILE",
        help=f"TOML or JSON stack config file{again}",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="machine-readable JSON output",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``chatlayers`` argument parser, with every registered command."""
    for module in COMMAND_MODULES:
        importlib.import_module(module)
    parser = _Parser(
        prog="chatlayers",
        description=(
            "Store, inspect and move LLM conversation histories. The stack comes from --url, "
            "--config, CHATLAYERS_URL, CHATLAYERS_CONFIG, else "
            "summarize::scrub::sqlite:///chatlayers.db (a file in the working directory)."
        ),
    )
    _common(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for spec in registered():
        sub = commands.add_parser(spec.name, help=spec.help, description=spec.help)
        _common(sub, top=False, many=spec.many_stacks)
        spec.arguments(sub)
        sub.set_defaults(
            handler=spec.handler,
            read_only=spec.read_only,
            existing_store=spec.existing_store,
            needs_stack=spec.needs_stack,
            check=spec.check,
            failure_status=spec.failure_status,
        )
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str | None) -> _Parser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            sub = action.choices[name]
            return sub if isinstance(sub, _Parser) else None
    return None


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args, extras = parser.parse_known_args(argv)
    if extras:
        sub = _subparser(parser, getattr(args, "command", None))
        target = sub if sub is not None else parser
        words = []
        for token in extras:
            close = sub.suggestion(token) if sub is not None else None
            words.append(f"{token} (did you mean {close}?)" if close else token)
        target.error(f"unrecognized arguments: {' '.join(words)}")
    check = getattr(args, "check", None)
    problem = check(args) if check is not None else None
    if problem:
        sub = _subparser(parser, getattr(args, "command", None))
        (sub if sub is not None else parser).error(problem)
    return args


def _open(args: argparse.Namespace) -> Stack:
    url, config = getattr(args, "url", None), getattr(args, "config", None)
    if url and config:
        raise ConfigError("give --url or --config, not both")
    if not url and not config and not os.environ.get(ENV_URL) and not os.environ.get(ENV_CONFIG):
        # A command may have its own default stack: replay's has a token budget (REPLAY_URL).
        url = getattr(args, "default_url", None)
    spec = to_spec(url or (Path(config) if config else None))
    # Commands that only read, or change only what is stored, must not create an empty
    # store (a SQLite file, a JSONL directory) at a mistyped path.
    if getattr(args, "read_only", False) or getattr(args, "existing_store", False):
        spec = existing_only(spec)
    return open_storage(spec)


async def _run(args: argparse.Namespace, out: Output) -> int:
    if not getattr(args, "needs_stack", True):
        code: int = await args.handler(args, out, None)
        return code
    stack = _open(args)
    if getattr(args, "read_only", False):
        _serve_only(stack)
    async with stack:
        # One span for the command when the stack has an otel layer (its calls inside).
        with operation(stack, "command", command=str(args.command)):
            code = await args.handler(args, out, stack)
        return code


def _serve_only(stack: Stack) -> None:
    """A command that only reads makes no summary: it shows the stored ones as they are, so
    looking at a conversation never changes what the deployment's own stack serves."""
    from storage.layers.summarizing import SummarizingChatStorage

    for component in components(stack):
        if isinstance(component, SummarizingChatStorage):
            component.serve_only = True


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    sys.stderr.write(f"chatlayers: warning: {message}\n")


def _errors(exc: BaseException) -> list[ChatStorageError] | None:
    """The distinct ``ChatStorageError``s ``exc`` is or holds (a task group raises a group:
    one conversation of a migration failing stops the others), at most three; ``None`` when
    it holds anything else (a bug: its traceback is shown)."""
    if isinstance(exc, ChatStorageError):
        return [exc]
    if not isinstance(exc, BaseExceptionGroup):
        return None
    found: list[ChatStorageError] = []
    for inner in exc.exceptions:
        leaves = _errors(inner)
        if leaves is None:
            return None
        found += [e for e in leaves if str(e) not in {str(f) for f in found}]
    return found[:3]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``chatlayers`` command; return the exit status (0 ok, 1 error, 2 usage; for
    ``diff`` and ``verify``, 1 is "they differ" and 2 an error)."""
    parser = build_parser()
    args = _parse(parser, argv)
    out = Output(json_mode=bool(getattr(args, "json", False)))
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning  # one readable line, no source excerpt
            return anyio.run(_run, args, out)
    except (ChatStorageError, BaseExceptionGroup) as exc:
        errors = _errors(exc)
        if errors is None:
            raise
        for error in errors:
            sys.stderr.write(f"chatlayers: error: {redact_url(str(error))}\n")
        status: int = getattr(args, "failure_status", 1)
        return status
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
