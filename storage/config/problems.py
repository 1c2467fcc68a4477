"""Every mistake of a configuration, collected while parsing and planning, raised as one error.

Parsing (:mod:`storage.config.chain`, :mod:`storage.config.loading`) and planning
(:mod:`storage.config.build`) record each problem with where it is (``[store]``,
``[[layers]] #2 (summarize)``, ``segment 1 (summarize)``) and carry on with the next
component, so a file with three mistakes reports three. :meth:`Problems.error` is the one
``ConfigError``: a single problem keeps its own wording (``SOURCE: MESSAGE``); several are
listed one a line under ``SOURCE: N problems:``. Secrets are redacted from the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

import attrs

from storage.errors import ConfigError
from storage.redact import redact_text, scrubbed_error

__all__ = ["Problem", "Problems"]

_NUMBERED: Final = re.compile(r"^(?:\[\[layers\]\] #|segment )(\d+)")


def _position(where: str) -> int:
    """Problems are listed in the order their components are written: the whole file first,
    then ``[store]``, then ``[[layers]] #N`` / ``segment N`` (found while parsing or
    planning alike)."""
    if not where:
        return -1
    numbered = _NUMBERED.match(where)
    return int(numbered.group(1)) if numbered else 0


@attrs.frozen
class Problem:
    """One mistake.

    Attributes:
        where: the component it is in (``"[[layers]] #2 (summarize)"``); ``""``: the whole
            configuration.
        message: what is wrong, the text a lone error of this kind has always had.
        cause: the exception it was found as, if any (chained when it is the only problem).
    """

    where: str
    message: str
    cause: BaseException | None = attrs.field(default=None, eq=False)

    def located(self) -> str:
        """``WHERE: MESSAGE`` (the message alone when it already starts with its place)."""
        if not self.where or self.message.startswith(self.where):
            return self.message
        return f"{self.where}: {self.message}"


@attrs.define
class Problems:
    """The problems found so far, in the order found."""

    items: list[Problem] = attrs.field(factory=list)

    def add(self, where: str, problem: str | ConfigError) -> None:
        """Record a problem found at ``where`` (a message, or the ``ConfigError`` raised)."""
        if isinstance(problem, ConfigError):
            self.items.append(Problem(where, str(problem), problem))
        else:
            self.items.append(Problem(where, problem))

    def extend(self, problems: Iterable[Problem]) -> None:
        """Record problems found elsewhere (a chain ``url`` inside a config file)."""
        self.items.extend(problems)

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def error(self, source: str, secrets: set[str]) -> ConfigError:
        """The one ``ConfigError`` naming every problem (``secrets`` redacted).

        One problem: ``SOURCE: MESSAGE``; several: ``SOURCE: N problems:`` and one
        ``  - WHERE: MESSAGE`` line each.
        """
        if len(self.items) == 1:
            only = self.items[0]
            text = f"{source}: {only.message}" if source else only.message
            if only.cause is None:
                return ConfigError(redact_text(text, secrets))
            error = scrubbed_error(ConfigError, text, only.cause, secrets)
            assert isinstance(error, ConfigError)
            return error
        lines = [f"{source}: {len(self.items)} problems:" if source else f"{len(self)} problems:"]
        ordered = sorted(self.items, key=lambda problem: _position(problem.where))
        lines += [f"  - {problem.located()}" for problem in ordered]
        return ConfigError(redact_text("\n".join(lines), secrets))

    def raise_if_any(self, source: str, secrets: set[str]) -> None:
        """Raise :meth:`error` when a problem was found.

        Raises:
            ConfigError: every problem found.
        """
        if self.items:
            error = self.error(source, secrets)
            raise error from error.__cause__
