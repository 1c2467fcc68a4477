"""Every mistake of a configuration, recorded by the passes and raised as one error.

Parsing (:mod:`storage.config.parse`) and resolving (:mod:`storage.config.resolve`) never
raise for a mistake in a configuration: each appends a :class:`Problem` (where it is:
``[store]``, ``[[layers]] #2 (summarize)``, ``segment 1 (summarize)``; what is wrong) to the
list it keeps, and carries on, so a file with three mistakes reports three.
:func:`config_error` turns the list into the one ``ConfigError``: a single problem keeps its
own wording (``SOURCE: MESSAGE``); several are listed one a line under
``SOURCE: N problems:``. Secrets are redacted from the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from storage.errors import ConfigError
from storage.redact import redact_text, scrubbed_error
from storage.stores.options import option_hint

__all__ = ["Problem", "config_error", "did_you_mean", "labelled"]

_NUMBERED: Final = re.compile(r"^(?:\[\[layers\]\] #|segment )(\d+)")
_NAMED: Final = re.compile(r"^(?:layer|store) '([^']+)'$")


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


def _position(where: str) -> int:
    """Problems are listed in the order their components are written: the whole file first,
    then ``[store]``, then ``[[layers]] #N`` / ``segment N`` (found while parsing or
    resolving alike)."""
    if not where:
        return -1
    numbered = _NUMBERED.match(where)
    return int(numbered.group(1)) if numbered else 0


def config_error(problems: Sequence[Problem], source: str, secrets: Iterable[str]) -> ConfigError:
    """The one ``ConfigError`` naming every problem (``secrets`` redacted); raise it
    ``from error.__cause__`` (set when a lone problem had a cause without secrets).

    One problem: ``SOURCE: MESSAGE``; several: ``SOURCE: N problems:`` and one
    ``  - WHERE: MESSAGE`` line each, in the order their components are written (a
    component's problems in the order they were recorded).
    """
    hidden = set(secrets)
    if len(problems) == 1:
        only = problems[0]
        text = f"{source}: {only.message}" if source else only.message
        if only.cause is None:
            return ConfigError(redact_text(text, hidden))
        error = scrubbed_error(ConfigError, text, only.cause, hidden)
        assert isinstance(error, ConfigError)
        return error
    lines = [f"{source}: {len(problems)} problems:" if source else f"{len(problems)} problems:"]
    ordered = sorted(problems, key=lambda problem: _position(problem.where))
    lines += [f"  - {problem.located()}" for problem in ordered]
    return ConfigError(redact_text("\n".join(lines), hidden))


def labelled(label: str, error: BaseException) -> str:
    """``LABEL: MESSAGE``, how a component's constructor (or its check) refusing a value
    reads: the message alone when it already names the component, and without the
    ``NAME: `` a layer's own errors open with (``scrub: cannot read ...`` under
    ``layer 'scrub'``)."""
    text = str(error)
    if text.startswith(label):
        return text
    named = _NAMED.search(label)
    if named is not None:
        text = text.removeprefix(f"{named.group(1)}: ")
    return f"{label}: {text}"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""`` (also an
    option that does the job another store's option of that name does: ``ttl``,
    ``retention``; see :func:`storage.stores.options.option_hint`)."""
    return option_hint(name, choices)
