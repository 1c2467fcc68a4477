"""Durations as people write them in config: ``"30d"``, ``"12h"``, ``"15m"``, ``"90s"``, ``"2w"``.

One parser for every option that is a length of time (retention, TTLs, intervals), so a
URL (``?retention=30d``), a TOML file (``retention = "30d"`` or ``retention = 2592000``) and
code (``timedelta(days=30)``) all mean the same thing. ``Duration`` and ``PositiveDuration``
are the annotations of such options: they carry their check (:mod:`storage.checked`), so
config reports a bad value with every other problem of the configuration.
:func:`format_duration` writes one back for messages, :func:`short_duration` as config
spells it.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Final, TypeAlias

from storage.checked import Check
from storage.errors import InvalidArgumentError

__all__ = [
    "UNITS",
    "Duration",
    "PositiveDuration",
    "format_duration",
    "short_duration",
    "parse_duration",
    "parse_positive_duration",
]

UNITS: Final = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_PATTERN: Final = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|w)?\s*", re.IGNORECASE)


def parse_duration(value: int | float | str | timedelta) -> float:
    """A duration in seconds.

    Args:
        value: seconds (``int``/``float``, or a string of a plain number), a ``timedelta``,
            or a number with a unit: ``ms``, ``s``, ``m`` (minutes), ``h``, ``d``, ``w``
            (``"1.5h"`` is 5400.0). Units are case-insensitive.

    Returns:
        The duration in seconds, finite and >= 0.

    Raises:
        InvalidArgumentError: a negative, infinite or NaN value, a bool, or a string that is
            not a number with an optional unit (the value is named).
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise InvalidArgumentError(f"a duration must be seconds or '30d', got {value!r}")
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _PATTERN.fullmatch(value)
        if match is None:
            raise InvalidArgumentError(
                f"invalid duration {value!r}: use seconds or a number with a unit "
                "(ms, s, m, h, d, w), e.g. '30d', '12h', '1.5h'"
            )
        seconds = float(match.group(1)) * UNITS[(match.group(2) or "s").lower()]
    else:
        raise InvalidArgumentError(
            f"a duration must be seconds, a string such as '30d' or a timedelta, "
            f"got {type(value).__name__} {value!r}"
        )
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise InvalidArgumentError(f"a duration must be finite and >= 0, got {value!r}")
    return seconds


def parse_positive_duration(value: int | float | str | timedelta) -> float:
    """A duration in seconds that must be more than zero (an interval, a TTL).

    Raises:
        InvalidArgumentError: what :func:`parse_duration` refuses, or zero.
    """
    seconds = parse_duration(value)
    if not seconds > 0:
        raise InvalidArgumentError(f"a duration must be > 0 seconds, got {value!r}")
    return seconds


_NAMES: Final = (("week", 604800.0), ("day", 86400.0), ("hour", 3600.0), ("minute", 60.0))


def format_duration(seconds: float) -> str:
    """``seconds`` for a person to read: ``"5 minutes"``, ``"1.5 hours"``, ``"45 seconds"``,
    ``"250 ms"`` (the largest unit it is at least one of, to one decimal; weeks only when whole)."""
    for name, size in _NAMES:
        if seconds >= size and (name != "week" or seconds % size == 0):
            return _count(seconds / size, name)
    if seconds >= 1 or seconds == 0:
        return _count(seconds, "second")
    return f"{seconds * 1000:.3g} ms"


def short_duration(seconds: float) -> str:
    """``seconds`` as a config option is written: ``2592000.0`` → ``"30d"``, ``7200`` →
    ``"2h"``, ``90.5`` → ``"90.5s"`` (the largest unit it is a whole number of); what
    :func:`parse_duration` reads back. Used by the stores' ``describe()``."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:.12g}s"


def _count(value: float, unit: str) -> str:
    text = f"{round(value, 1):g}"
    return f"{text} {unit}" + ("" if text == "1" else "s")


#: An option that is a duration >= 0: seconds, a string such as ``"30d"`` or a ``timedelta``.
Duration: TypeAlias = Annotated[float | str | timedelta, Check(parse_duration)]
#: An option that is a duration > 0.
PositiveDuration: TypeAlias = Annotated[float | str | timedelta, Check(parse_positive_duration)]
