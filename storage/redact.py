"""Secrets kept out of every repr, log line, error and ``describe()`` output.

A secret is a URL password (``redis://:PASSWORD@host``) or the value of an option, query
parameter or keyword argument whose name says so (``secret``, ``password``, ``pass``, ``pwd``,
``token``, ``key``, ``api_key``, ``auth``, ``credential``, ...; not ``X_env``, whose value
only names an environment variable). Redaction replaces it by ``***``. Two complementary
tools: :func:`redact_url` needs no knowledge of the secrets (it recognizes them by position),
:func:`redact_text` also replaces the known secret strings wherever they appear (in a driver's
message, say), found by :func:`secrets_of_url` and :func:`secrets_of_options`. The config
machinery, the server stores and the LLM summarizer all redact with these functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote

from storage.errors import ChatStorageError

__all__ = [
    "REDACTED",
    "is_sensitive",
    "redact_options",
    "redact_text",
    "redact_url",
    "scrubbed_error",
    "secrets_of_options",
    "secrets_of_url",
]

REDACTED: Final = "***"
# Errs towards hiding: a name that merely looks secret is hidden too, except a count of
# tokens (``trigger_tokens``, ``max_input_tokens``: budgets, which describe() must show).
_SENSITIVE = re.compile(
    r"secret|passw|^pass$|pwd|token(?!s$)|api_?key|(?:^|_)keys?(?:_|$)|credential|auth", re.I
)
_URL_PASSWORD = re.compile(r"(?P<pre>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)(?P<pw>[^\s/?#]*)@")
_QUERY_PARAM = re.compile(r"""(?P<sep>[?&])(?P<key>[^=&?:\s]+)=(?P<value>[^&\s:'"(){}\[\],]*)""")


def is_sensitive(name: str) -> bool:
    """True for an option, query parameter or keyword name that holds a secret
    (``password``, ``token``, ``aws_access_key_id``); false for ``X_env`` names, whose value
    is a variable name."""
    return not name.endswith("_env") and bool(_SENSITIVE.search(name))


def redact_url(url: str) -> str:
    """``url`` with its password and sensitive query values replaced by ``***``.

    Works on whole chains (``summarize::redis://:pw@host``) and on any text holding URLs.
    """
    text = _URL_PASSWORD.sub(lambda m: m["pre"] + (REDACTED if m["pw"] else "") + "@", url)
    if "?" not in text:
        return text

    def query(match: re.Match[str]) -> str:
        key = match["key"]
        return f"{match['sep']}{key}={REDACTED}" if is_sensitive(unquote(key)) else match[0]

    return _QUERY_PARAM.sub(query, text)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with URL passwords redacted and every string of ``secrets`` replaced by ``***``.

    A secret shorter than 8 characters is replaced only where it stands as a whole token (not
    inside a longer word): replacing every ``a`` of a one-letter password would garble the
    text and spell out where the secret's characters are.
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        if len(secret) >= 8:
            text = text.replace(secret, REDACTED)
        else:
            pattern = rf"(?<![0-9A-Za-z]){re.escape(secret)}(?![0-9A-Za-z])"
            text = re.sub(pattern, REDACTED, text)
    return redact_url(text)


def secrets_of_url(url: str) -> set[str]:
    """Every secret of a URL or a whole chain, found leniently (before it is validated): URL
    passwords and the values of sensitive query options, raw and percent-encoded."""
    found: set[str] = set()
    for match in _URL_PASSWORD.finditer(url):
        if match["pw"]:
            found.update({match["pw"], unquote(match["pw"])})
    for segment in url.split("::"):
        _, _, query = segment.partition("?")
        options = dict(parse_qsl(query, keep_blank_values=True))
        for key, value in options.items():
            if is_sensitive(key) and value:
                found.add(quote(value, safe=""))
        found |= secrets_of_options(options)
    return found


def secrets_of_options(options: Mapping[str, Any]) -> set[str]:
    """Every secret string of ``options``: sensitive values, and the secrets of URLs and JSON
    objects given as values, searched through nested mappings and lists."""
    found: set[str] = set()
    for name, value in options.items():
        if isinstance(value, str):
            if is_sensitive(name) and value:
                found.add(value)
            if "://" in value:
                found |= secrets_of_url(value)
            if value.lstrip().startswith("{"):  # a mapping given as JSON in a URL
                try:
                    decoded = json.loads(value)
                except ValueError:
                    decoded = None
                if isinstance(decoded, Mapping):
                    found |= secrets_of_options(decoded)
        elif isinstance(value, Mapping):
            found |= secrets_of_options(value)
        elif isinstance(value, list | tuple):
            for item in value:
                found |= secrets_of_options({name: item})
    return found


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` (nested mappings too) with sensitive values and URL passwords
    replaced by ``***``."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if isinstance(value, Mapping):
            out[name] = redact_options(value)
        elif is_sensitive(name) and value is not None:
            out[name] = REDACTED
        elif isinstance(value, str):
            out[name] = redact_url(value)
        else:
            out[name] = value
    return out


def scrubbed_error(
    cls: type[ChatStorageError], message: str, original: BaseException, secrets: set[str]
) -> ChatStorageError:
    """A new error of ``cls`` with ``message``'s secrets redacted, chained to ``original``.

    ``original`` is kept as ``__cause__`` only when no exception of its chain holds a secret
    in its text (a traceback prints the whole chain).
    """
    error = cls(redact_text(message, secrets))
    seen: set[int] = set()
    link: BaseException | None = original
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        text = str(link)
        if redact_text(text, secrets) != text:
            return error
        link = link.__cause__ or link.__context__
    error.__cause__ = original
    return error
