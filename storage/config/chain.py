"""The URL-chain grammar: ``layer[?opts]::...::store://location[?opts]`` to a ``StackSpec``.

Chains are fsspec style, outermost layer first, the base store last::

    summarize::scrub::sqlite:///chats.db
    summarize?trigger_at=10&keep_last=2::scrub?mode=mask::sqlite:///chats.db
    summarize?summarizer=litellm&summarizer.model=gpt-4o-mini::redis://:PASSWORD@host:6379/0

Each layer segment is ``name[?option=value&...]``; the last segment is the store URL, whose
query options are the store's constructor options (a Redis or PostgreSQL URL keeps the query
parameters the store does not declare, for its driver). A nested summarizer is named by
``summarizer=NAME`` and configured by ``summarizer.OPTION=value``. Values stay strings here;
:mod:`storage.config.options` converts them by declared type when the stack is built.

Store URLs: ``memory://``; ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``,
``sqlite://:memory:`` (SQLAlchemy's form); ``jsonl://relative/dir``, ``jsonl:///absolute/dir``
(a file URL: everything after ``jsonl://`` is the path); ``redis://[:password@]host:port/db``,
``rediss://...``; ``postgresql://user:password@host:port/db`` (``postgres://`` too). Relative
paths are relative to the working directory; percent-encode ``?``, ``#`` and ``::`` in a path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from storage.config.spec import NESTED, ComponentSpec, StackSpec
from storage.errors import ConfigError
from storage.redact import redact_text, redact_url, secrets_of_url

__all__ = [
    "NO_LOCATION_SCHEMES",
    "PATH_SCHEMES",
    "has_location",
    "parse_store_url",
    "parse_url",
    "query_keys",
    "store_path",
    "strip_query",
]

# Stores whose URL points at a file or directory: the path is their first parameter.
PATH_SCHEMES: Final = frozenset({"sqlite", "jsonl"})
# Stores that take no location.
NO_LOCATION_SCHEMES: Final = frozenset({"memory"})


def parse_url(url: str) -> StackSpec:
    """Parse a URL chain ``layer[?opts]::...::store://location[?opts]`` (nothing is built).

    Raises:
        ConfigError: an empty segment, a layer segment that is not a name, a last segment that
            is not a store URL, or an option given twice.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("a stack URL must be a non-empty string such as 'sqlite:///chats.db'")
    secrets = secrets_of_url(url)
    source = f"URL {redact_text(url, secrets)}"
    try:
        *layer_parts, store_part = url.strip().split("::")
        layers: list[ComponentSpec] = []
        for index, part in enumerate(layer_parts):
            name, _, query = part.partition("?")
            if not name or "/" in name or " " in name:
                raise ConfigError(
                    f"{source}: segment {index + 1} ({part!r}) is not a layer name; "
                    "layers come first, each as name[?option=value&...], the store URL last"
                )
            layers.append(ComponentSpec("layers", name, _parse_query(query, f"layer {name!r}")))
        store = parse_store_url(store_part, source)
    except ConfigError as exc:
        raise ConfigError(redact_text(str(exc), secrets)) from None
    return StackSpec(store, layers, source)


def parse_store_url(url: str, source: str) -> ComponentSpec:
    """The store of a store URL ``scheme://location[?options]`` (``source`` names it in errors).

    Raises:
        ConfigError: ``url`` has no ``scheme://``, or an option is given twice.
    """
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        hint = ""
        if scheme and ":" not in scheme:
            hint = f" ({scheme!r} looks like a layer name; the last segment must be a store URL)"
        raise ConfigError(
            f"{source}: the last segment {redact_url(url)!r} is not a store URL such as "
            f"'sqlite:///chats.db' or 'memory://'{hint}"
        )
    scheme = scheme.lower()
    _, _, query = url.partition("?")
    options = _parse_query(query, f"store {scheme!r}") if query else {}
    return ComponentSpec("stores", scheme, options, url=url)


def _parse_query(query: str, where: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in options:
            raise ConfigError(f"{where}: option {key!r} is given twice")
        options[key] = value
    return _nest_dotted(options, where)


def _nest_dotted(options: dict[str, Any], where: str) -> dict[str, Any]:
    """Nest dotted options: ``summarizer=litellm&summarizer.model=x`` becomes
    ``{"summarizer": {"type": "litellm", "model": "x"}}``."""
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in options.items():
        head, dot, rest = key.partition(".")
        if not dot:
            out[key] = value
            continue
        if head not in NESTED or not rest or "." in rest:
            raise ConfigError(
                f"{where}: option {key!r}: only nested components "
                f"({', '.join(NESTED)}) take dotted options; give mappings as JSON"
            )
        nested.setdefault(head, {})[rest] = value
    for head, sub in nested.items():
        name = out.get(head)
        if not isinstance(name, str):
            raise ConfigError(f"{where}: '{head}.*' options need {head}=NAME too")
        out[head] = {"type": name, **sub}
    return out


def store_path(url: str, scheme: str) -> str:
    """The file path of a ``sqlite`` or ``jsonl`` URL (``~`` expanded).

    ``sqlite`` follows SQLAlchemy: ``sqlite:///relative.db``, ``sqlite:////absolute.db``,
    ``sqlite://:memory:``. ``jsonl`` follows file URLs (DESIGN §4 ``jsonl://PATH``): everything
    after ``jsonl://`` is the path, so ``jsonl://chats`` is relative and ``jsonl:///var/chats``
    absolute.

    Raises:
        ConfigError: the URL has no path.
    """
    parts = urlsplit(url)
    path = unquote(parts.netloc) + unquote(parts.path)
    if scheme == "sqlite" and not parts.netloc and path.startswith("/"):
        path = path[1:]
    if not path:
        hint = (
            "sqlite:///relative.db, sqlite:////absolute.db or sqlite://:memory:"
            if scheme == "sqlite"
            else f"{scheme}://relative/dir or {scheme}:///absolute/dir"
        )
        raise ConfigError(f"store {scheme!r}: the URL {redact_url(url)!r} has no path; use {hint}")
    return os.path.expanduser(path)


def has_location(url: str) -> bool:
    """Whether a store URL names a host or a path (``memory://`` does not)."""
    parts = urlsplit(url)
    return bool(parts.netloc or parts.path.strip("/"))


def query_keys(url: str) -> list[str]:
    """The names of ``url``'s query parameters, in order (decoded)."""
    return [key for key, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)]


def strip_query(url: str, drop: Iterable[str]) -> str:
    """``url`` without the query parameters named in ``drop`` (the others kept verbatim)."""
    drop = set(drop)
    if not drop:
        return url
    parts = urlsplit(url)
    kept = [
        piece
        for piece in parts.query.split("&")
        if piece and unquote(piece.partition("=")[0]) not in drop
    ]
    return urlunsplit(parts._replace(query="&".join(kept)))
