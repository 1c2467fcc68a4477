"""Server store URLs: pull chatlayers' own query options out, leave the driver's.

Redaction of the passwords these URLs hold is :mod:`storage.redact`'s job.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["pop_query"]


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
