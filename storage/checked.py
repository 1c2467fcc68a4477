"""Option values checked where the option is declared: ``Annotated[T, Check(function)]``.

A constructor declares the check an option's value must pass in the parameter's annotation::

    Duration = Annotated[float | str | timedelta, Check(parse_duration)]

    def __init__(self, *, retention: Duration | None = None) -> None:
        self.retention = parse_duration(retention) if retention is not None else None

``function(value)`` raises :class:`~storage.errors.InvalidArgumentError` (any ``ValueError``
or ``TypeError`` counts too) for a bad value; what it returns is ignored by config. The same
function serves both paths:

- code that calls the constructor gets the constructor's own error (the constructor calls
  ``function`` itself: ``InvalidArgumentError`` for the built-in stores, ``ConfigError`` where
  a store always raised that);
- :mod:`storage.config` runs every ``Check`` of every option while it converts options,
  before anything is constructed, so a bad value is one ``ConfigError`` problem listed
  with every other problem of the same URL, dict or TOML file (``open_storage`` reports them
  all at once).

A component whose option is checked only inside its constructor still works: config turns
the constructor's ``InvalidArgumentError`` into a ``ConfigError``, but then only the first
such problem is reported. Annotate the option to have it collected with the others.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["Check", "checks_of"]


@attrs.frozen
class Check:
    """The check a value of an ``Annotated[T, Check(function)]`` option must pass.

    Attributes:
        function: called with the value (already converted to ``T``); raises
            ``InvalidArgumentError`` (or ``ValueError`` / ``TypeError``) naming what is
            wrong with it.
    """

    function: Callable[[Any], object]

    def __call__(self, value: Any) -> None:
        """Run the check.

        Raises:
            InvalidArgumentError: (or what ``function`` raises) the value is bad.
        """
        self.function(value)


def checks_of(annotation: Any) -> tuple[Check, ...]:
    """The ``Check`` markers of an ``Annotated[...]`` annotation (none for any other)."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return ()
    return tuple(item for item in annotation.__metadata__ if isinstance(item, Check))
