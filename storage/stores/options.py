"""Checked constructor options of the stores: one error type, and config sees every check.

A bad option value given to a store's constructor raises ``InvalidArgumentError`` naming the
option, on every store. The options are annotated ``Annotated[T, Check(function)]``
(:mod:`storage.checked`), so :mod:`storage.config` runs the same checks while it resolves a
URL, dict or TOML file and reports every bad value of a configuration at once, as
``ConfigError`` problems, before anything is built. A rule joining two options
(``min_size <= max_size``) stays in the constructor.

What a URL names itself (its scheme, path, host, query spelling) is config, not an option
value: a store's ``from_url`` (or a server store's constructor reading its URL) raises
``ConfigError`` for those.

:func:`option_hint` is the "did you mean" of an unknown option name, shared by config and the
stores' URLs: the nearest spellings, and the option that does the same job in this store when
the name is another store's (``ttl`` on SQLite, ``retention`` on Redis).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Final, TypeAlias, TypeVar

from storage.checked import Check
from storage.errors import InvalidArgumentError

__all__ = [
    "CallableOption",
    "Count",
    "PositiveCount",
    "PositiveSeconds",
    "Seconds",
    "check_callable",
    "check_count",
    "check_positive_count",
    "check_positive_seconds",
    "check_seconds",
    "checked",
    "option_hint",
]

T = TypeVar("T")

#: Names people give a store's expiry, and what each store's own expiry option means.
_EXPIRY_WORDS: Final = frozenset(
    {"retention", "ttl", "expire", "expiry", "expiration", "expire_after", "max_age"}
)
_EXPIRY: Final = {
    "retention": "this store deletes messages older than it, on writes and `chatlayers purge`",
    "ttl": "this store's server expires a session's keys that long after its last write",
}


def option_hint(name: str, choices: Iterable[str], *, n: int = 3, cutoff: float = 0.6) -> str:
    """``" (did you mean 'x'?)"`` for the options of ``choices`` nearest ``name`` (difflib's
    ratio at least ``cutoff``), or ``""``.

    Besides spellings, an expiry given under another store's name (``ttl``, ``retention``,
    ``expiry``...) points to this store's own, with what it means, since the two differ.
    """
    known = sorted(choices)
    close = difflib.get_close_matches(name, known, n=n, cutoff=cutoff)
    if close:
        return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
    if name.lower() in _EXPIRY_WORDS:
        for option, meaning in _EXPIRY.items():
            if option in known and option != name:
                return f" (did you mean {option!r}? {meaning})"
    return ""


def check_seconds(value: object) -> float:
    """Raises: InvalidArgumentError: not a number of seconds >= 0 (a bool or NaN refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidArgumentError(f"must be seconds >= 0, got {value!r}")
    return float(value)


def check_positive_seconds(value: object) -> float:
    """Raises: InvalidArgumentError: not a finite number of seconds > 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not value > 0
    ):
        raise InvalidArgumentError(f"must be seconds > 0, got {value!r}")
    return float(value)


def check_count(value: object) -> int:
    """Raises: InvalidArgumentError: not an int >= 0 (a bool refused)."""
    if type(value) is not int or value < 0:
        raise InvalidArgumentError(f"must be an int >= 0, got {value!r}")
    return value


def check_positive_count(value: object) -> int:
    """Raises: InvalidArgumentError: not an int >= 1 (a bool refused)."""
    if type(value) is not int or value < 1:
        raise InvalidArgumentError(f"must be an int >= 1, got {value!r}")
    return value


def check_callable(value: object) -> object:
    """Raises: InvalidArgumentError: not callable (a clock: ``Callable[[], float]``)."""
    if not callable(value):
        raise InvalidArgumentError(f"must be a callable returning seconds, got {value!r}")
    return value


def checked(name: str, value: T, check: Callable[[Any], object]) -> T:
    """``value`` after ``check``, its error naming the option.

    Raises:
        InvalidArgumentError: ``"<name> must be ..., got ..."`` (``"<name>: ..."`` for a
            message that does not start with "must").
    """
    try:
        check(value)
    except (ValueError, TypeError) as exc:
        text = str(exc)
        raise InvalidArgumentError(
            f"{name} {text}" if text.startswith("must") else f"{name}: {text}"
        ) from None
    return value


#: Seconds >= 0 (``busy_timeout``, ``fsync_interval``).
Seconds: TypeAlias = Annotated[float, Check(check_seconds)]
#: Seconds > 0 (a statement timeout).
PositiveSeconds: TypeAlias = Annotated[float, Check(check_positive_seconds)]
#: An int >= 0 (a cache budget; 0 turns the cache off).
Count: TypeAlias = Annotated[int, Check(check_count)]
#: An int >= 1 (a pool size, a number of cached keys).
PositiveCount: TypeAlias = Annotated[int, Check(check_positive_count)]
#: A clock: ``Callable[[], float]`` of epoch seconds.
CallableOption: TypeAlias = Annotated[Callable[[], float], Check(check_callable)]
