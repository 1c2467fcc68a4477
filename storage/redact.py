"""Secrets kept out of every repr, log line, error and ``describe()`` output.

A secret is a URL password (``redis://:PASSWORD@host``) or the value of an option, query
parameter or keyword argument whose name says so (``secret``, ``password``, ``pass``, ``pwd``,
``token``, ``key``, ``api_key``, ``auth``, ``credential``, ...; see :func:`is_sensitive`: not
``X_env``, whose value only names an environment variable, nor ``json_keys``, whose keys are
JSON field names). Redaction replaces it by ``***``. Two complementary tools:
:func:`redact_url` needs no knowledge of the secrets (it recognizes them by position),
:func:`redact_text` also replaces the known secret strings where they stand as a value (in a
driver's message, say; never inside a word of the text around them), found by
:func:`secrets_of_url` and :func:`secrets_of_options`. The config machinery, the server
stores and the LLM summarizer all redact with these functions.
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
# Errs towards hiding: a name that merely looks secret is hidden too. Not hidden: a name
# whose last word says its value is something else (``secret_env``: a variable's name;
# ``secret_source``: where a secret came from; ``key_file``: a path), a count or a bound
# (``max_cached_keys``, ``min_password_length``; ``trigger_tokens``, ``max_input_tokens``:
# budgets, which describe() must show), and the keys of something else (``json_keys``: the
# JSON field names whose values are scrubbed).
_SECRET_WORD = re.compile(
    r"secret|passw|pwd|credential|auth|api_?key|(?:private|access|master|signing)_?keys?", re.I
)
_NOT_THE_VALUE: Final = frozenset({"env", "source", "file", "path"})
_BOUND: Final = frozenset({"max", "min", "num", "n"})
_KEYS_OF: Final = frozenset(
    {"json", "field", "fields", "column", "sort", "partition", "primary", "cache", "cached"}
)
_NOT_A_TOKEN: Final = re.compile(r"tokens|tokeni[sz](?:e|er|ers|ation)")
_URL_PASSWORD = re.compile(r"(?P<pre>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)(?P<pw>[^\s/?#]*)@")
_QUERY_PARAM = re.compile(r"""(?P<sep>[?&])(?P<key>[^=&?:\s]+)=(?P<value>[^&\s:'"(){}\[\],]*)""")
# A secret this long is replaced wherever it occurs: any occurrence would show it.
_ANYWHERE: Final = 8
# A shorter one only where it stands as a value: a whole token, from the start of the text,
# whitespace, a quote or a separator of URLs and lists to the next (or a sentence's end).
# Never inside a word: the "e" of "e.g.", the "a" of "a.db" or the "t" of "don't" stay.
_DELIMITERS: Final = r"""\s"`=&?:@,;()\[\]{}<>|"""
_TOKEN_START: Final = rf"(?:^|(?<=[{_DELIMITERS}])|(?<=^')|(?<=[^0-9A-Za-z]'))"
_TOKEN_END: Final = rf"(?=$|[{_DELIMITERS}]|'(?![0-9A-Za-z])|[.!]+(?:\s|$))"


def is_sensitive(name: str) -> bool:
    """True for an option, query parameter or keyword name that holds a secret
    (``password``, ``token``, ``api_key``, ``aws_access_key_id``, ``master_keys``); false
    for names whose value is not the secret: ``X_env`` (a variable's name), ``X_source``,
    ``X_file`` and ``X_path``, counts and bounds (``max_cached_keys``, ``trigger_tokens``)
    and keys of something else (``json_keys``)."""
    words = re.findall(r"[a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    if not words or words[-1] in _NOT_THE_VALUE or words[0] in _BOUND:
        return False
    if _SECRET_WORD.search(name) or words[-1] == "pass":
        return True
    for index, word in enumerate(words):
        if "token" in word and not _NOT_A_TOKEN.fullmatch(word):
            return True
        if word in ("key", "keys") and (index == 0 or words[index - 1] not in _KEYS_OF):
            return True
    return False


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
    """``text`` with URL passwords redacted and every string of ``secrets`` replaced by ``***``
    where it stands as a value.

    A secret of 8 characters or more is replaced wherever it occurs. A shorter one is replaced
    only where it stands as a whole token, between whitespace, quotes, URL and list separators
    (``= & ? : @ , ; ( ) [ ] { } < > |``) or the ends of the text (``'e'``, ``secret=e&``,
    ``password e rejected``), never inside a longer word or name (the ``e`` of ``e.g.``, the
    ``a`` of ``a.db``): replacing every ``a`` of a one-letter password would garble the text
    and spell out where the secret's characters are. A secret is also found as ``repr`` and
    JSON write it (quotes, backslashes and other characters escaped).
    """
    forms = {form for secret in secrets if secret for form in _written_forms(secret)}
    for secret in sorted(forms, key=len, reverse=True):
        if len(secret) >= _ANYWHERE:
            text = text.replace(secret, REDACTED)
        else:
            text = re.sub(_TOKEN_START + re.escape(secret) + _TOKEN_END, REDACTED, text)
    return redact_url(text)


def _written_forms(secret: str) -> set[str]:
    """``secret`` as it is, and as ``repr`` and JSON write it inside their quotes."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]}
    return {form for form in forms if form}


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
