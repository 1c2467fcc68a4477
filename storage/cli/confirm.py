"""Asking before a destructive command deletes more than one conversation."""

from __future__ import annotations

import sys
from typing import TextIO

from storage.errors import ConfigError

__all__ = ["confirm"]


def confirm(
    what: str, *, yes: bool, stdin: TextIO | None = None, stderr: TextIO | None = None
) -> None:
    """Return when the user agrees to ``what`` (or gave ``--yes``).

    With no terminal to ask (CI, a pipe) the command is refused unless ``--yes`` was given.

    Raises:
        ConfigError: the user declined, or there is no terminal and no ``--yes``.
    """
    if yes:
        return
    stdin = stdin if stdin is not None else sys.stdin
    stderr = stderr if stderr is not None else sys.stderr
    try:
        interactive = stdin.isatty()
    except (AttributeError, ValueError):
        interactive = False
    if not interactive:
        raise ConfigError(
            f"refusing to {what} without confirmation: no terminal to ask; "
            "re-run with --yes (or --dry-run to see what would be deleted)"
        )
    stderr.write(f"{what[0].upper()}{what[1:]}? [y/N] ")
    stderr.flush()
    answer = stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise ConfigError("cancelled: nothing was deleted")
