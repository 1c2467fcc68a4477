"""Store URLs: each store reads its own URL with these helpers (``BaseStore.from_url``).

- :func:`path_from_url`: the file path of a file store's URL (``sqlite:///chats.db``,
  ``jsonl://chats``), with the right spelling shown when a URL is mistyped;
- :func:`drop_query`: the URL without chatlayers' own query options, the driver's kept
  (``postgresql://h/db?sslmode=require&schema=chat`` → ``...?sslmode=require``);
- :func:`check_query`: refuse query options a store does not know (``did you mean``).

``storage.config`` converts the query options a store's constructor declares and passes them
to ``from_url`` as keyword options; the URL it passes still holds the whole query. Redaction
of passwords is :mod:`storage.redact`'s job.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from storage.errors import ConfigError
from storage.redact import redact_url
from storage.stores.options import option_hint

__all__ = ["check_query", "drop_query", "path_from_url", "pop_query", "query_names"]


def query_names(url: str) -> list[str]:
    """The names of ``url``'s query parameters, in order, decoded."""
    return [k for k, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)]


def check_query(url: str, scheme: str, known: Iterable[str]) -> None:
    """Refuse query parameters of ``url`` that are not in ``known``.

    Args:
        url: the store URL as typed.
        scheme: the store's scheme, for the message.
        known: the option names the store takes (the ``options`` ``from_url`` was given
            hold every declared one the query had).

    Raises:
        ConfigError: an unknown parameter, named, with the closest known name suggested.
    """
    allowed = set(known)
    for name in query_names(url):
        if name not in allowed:
            hint = option_hint(name, allowed, n=1)
            raise ConfigError(
                f"store {scheme!r}: the URL {redact_url(url)!r} has an unknown option "
                f"{name!r}{hint}"
            )


def path_from_url(url: str, scheme: str, *, options: Collection[str] | None = None) -> str:
    """The file path of a file store's URL, ``~`` expanded; the query is not part of it.

    ``sqlite`` follows SQLAlchemy: ``sqlite:///relative.db``, ``sqlite:////absolute.db``,
    ``sqlite://:memory:``. Other schemes (``jsonl``) follow ``jsonl://PATH``:
    everything after ``scheme://`` is the path, so ``jsonl://chats`` is relative and
    ``jsonl:///var/chats`` absolute. Percent-encode ``?`` and ``#`` inside a path.

    Args:
        url: the store URL as typed (query included).
        scheme: the grammar: ``"sqlite"`` or another file scheme (``"jsonl"``); the URL's own
            scheme may differ (a store registered under another name).
        options: when given, the option names the store was given (``from_url``'s
            ``options``); any other query parameter is refused.

    Raises:
        ConfigError: no ``://``, no path, ``sqlite://x.db`` (two slashes: a host, not a
            path; the message shows ``sqlite:///x.db``), or an unknown query parameter.
    """
    _, sep, rest = url.partition("://")  # the scheme is the registered name: any will do
    if not sep:
        raise ConfigError(f"store {scheme!r}: {redact_url(url)!r} is not a {scheme}:// URL")
    location = rest.partition("?")[0].partition("#")[0]
    if options is not None:
        check_query(url, scheme, options)
    if scheme == "sqlite":
        if location == ":memory:":
            return ":memory:"
        if not location.startswith("/"):
            if location:
                raise ConfigError(
                    f"store 'sqlite': {redact_url(url)!r} names a host, not a file; "
                    f"write sqlite:///{location} (relative) or sqlite:////{location.lstrip('/')} "
                    "(absolute)"
                )
            location = ""
        else:
            location = location[1:]
    path = unquote(location)
    if not path:
        hint = (
            "sqlite:///relative.db, sqlite:////absolute.db or sqlite://:memory:"
            if scheme == "sqlite"
            else f"{scheme}://relative/dir or {scheme}:///absolute/dir"
        )
        raise ConfigError(f"store {scheme!r}: the URL {redact_url(url)!r} has no path; use {hint}")
    return os.path.expanduser(path)


def drop_query(url: str, names: Iterable[str]) -> str:
    """``url`` without the query parameters named in ``names`` (the others kept verbatim,
    in order; the ``?`` goes when nothing is left)."""
    drop = set(names)
    parts = urlsplit(url)
    if not parts.query or not drop:
        return url
    kept = [
        piece
        for piece in parts.query.split("&")
        if piece and unquote(piece.partition("=")[0].replace("+", " ")) not in drop
    ]
    return urlunsplit(parts._replace(query="&".join(kept)))


def pop_query(url: str, names: frozenset[str]) -> tuple[str, dict[str, str]]:
    """Split chatlayers' own query options (``names``) from the ones the driver understands.

    Prefer :func:`drop_query` with the typed options ``from_url`` receives; this one returns
    the raw strings (kept for stores that parse their own query).

    Returns:
        ``(url without those options, {name: value})``; the last value wins on repeats.
    """
    parts = urlsplit(url)
    if not parts.query:
        return url, {}
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if k in names:
            ours[k] = v
        else:
            rest.append((k, v))
    if not ours:
        return url, {}
    return urlunsplit(parts._replace(query=urlencode(rest))), ours
