"""Server URLs: redact the password for messages and reprs, pull chatlayers' own options out."""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["pop_query", "redact_url", "scrub_secret"]

_SECRET_PARAMS: Final = frozenset({"password", "pass", "passwd", "pwd", "sslpassword"})
_MASK: Final = "***"


def redact_url(url: str) -> str:
    """``url`` with its password (userinfo or a ``password=`` query value) replaced by ``***``.

    ``redis://:secret@host:6379/0`` becomes ``redis://:***@host:6379/0``. A string that is not
    a URL is returned unchanged when it holds no ``@`` and ``"<unparseable URL>"`` otherwise.
    """
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostinfo = netloc.rpartition("@")
            user, colon, _ = userinfo.partition(":")
            netloc = f"{user}:{_MASK}@{hostinfo}" if colon else netloc
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(k.lower() in _SECRET_PARAMS for k, _ in pairs):
                query = urlencode(
                    [(k, _MASK if k.lower() in _SECRET_PARAMS else v) for k, v in pairs],
                    safe="*",
                )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "<unparseable URL>" if "@" in url else url


def scrub_secret(text: str, url: str) -> str:
    """``text`` (a driver's error message) with the URL's password, if it appears, masked."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return text
    if password and len(password) >= 3 and password in text:
        return text.replace(password, _MASK)
    return text


def pop_query(url: str, names: frozenset[str]) -> tuple[str, dict[str, str]]:
    """Split chatlayers' own query options (``names``) from the ones the driver understands.

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
