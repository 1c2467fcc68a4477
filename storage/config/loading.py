"""Open a stack from a URL chain, a dict or a TOML/JSON file: ``open_storage``.

A configuration goes through three passes, each in its own module:

1. **parse** (:mod:`storage.config.parse`): the URL chain, dict or file to a
   ``StackSpec``; pure (no environment, no registry, no file but the config file);
2. **resolve** (:mod:`storage.config.resolve`): names to factories, ``X_env`` options from
   the environment, ``*_file`` paths, every option converted and checked by its declared
   type, then the checks each built-in layer's constructor makes that need nothing built;
   every problem and every secret collected in one ``StackPlan``;
3. **construct** (:mod:`storage.config.construct`): the store, then each layer around it.

``open_storage`` raises once, between resolving and constructing, with every problem of the
configuration (see :mod:`storage.config.problems`): a bad configuration constructs nothing.
What only the built stack can tell (:mod:`storage.config.construct` lists it) is raised
while constructing, one error at a time, after the same source.
Any option ``X`` may be given as ``X_env = "VARIABLE"`` (read from the environment; an
unset variable is an error); options ending in ``_file`` are relative to the config file's
directory. Values from TOML keep their native types and are checked against the declared
ones (a number given for a string option is refused, never guessed). Passwords (in URLs,
and options named like ``secret``, ``password``, ``token``, ``api_key``) are redacted in
every repr, log line, error and ``describe()`` output. ``describe()`` names where a secret
came from the same way for every source: ``secret=env:VARIABLE`` (``secret_env`` or the
scrubber's default variable), ``secret=config`` (written in the file or URL),
``secret=argument`` (code), ``secret=random per-process``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from storage.config.construct import construct
from storage.config.parse import Parser, load_config, parse_config
from storage.config.problems import config_error
from storage.config.registry import Registry
from storage.config.resolve import (
    ENV_CONFIG,
    ENV_URL,
    configured_source,
    read_store_url,
    resolve,
)
from storage.config.spec import StackSpec
from storage.config.stack import Stack
from storage.errors import ConfigError

__all__ = [
    "DEFAULT_URL",
    "ENV_CONFIG",
    "ENV_URL",
    "load_config",
    "open_storage",
    "parse_config",
    "to_spec",
]

DEFAULT_URL: Final = "summarize::scrub::sqlite:///chatlayers.db"
"""The stack used when nothing is configured: extractive summaries over scrubbed SQLite."""


def open_storage(
    spec: str | os.PathLike[str] | Mapping[str, Any] | StackSpec | None = None,
    *,
    registry: Registry | None = None,
) -> Stack:
    """Build a ready stack from a URL chain, a config dict, or a TOML/JSON config file.

    With no ``spec``: ``CHATLAYERS_URL`` (a URL chain) or ``CHATLAYERS_CONFIG`` (a config
    file path) from the environment, else :data:`DEFAULT_URL`
    (``summarize::scrub::sqlite:///chatlayers.db``, a file in the working directory).

    Construction is synchronous and opens no network connection (network stores connect on
    first use); use the result directly or as ``async with open_storage(...) as stack:``,
    which closes it on exit.

    Args:
        spec: a URL chain (``"summarize::scrub::sqlite:///chats.db"``), a path to a ``.toml``
            or ``.json`` config file (``str`` or ``Path``), a config mapping, a parsed
            ``StackSpec``, or ``None``.
        registry: the registry to resolve names in (default: the process-wide one).

    Raises:
        ConfigError: every mistake of the configuration, in one error: unknown names ("did
            you mean ..."), missing optional drivers (``pip install 'chatlayers[redis]'``),
            bad options and values (the component, option and allowed values named), unset
            environment variables, rules joining a layer's options, a file it names that
            cannot be read; also both environment variables set, or a config file that
            cannot be read. Then, alone, what only building can tell (a store's own reading
            of its URL, ``summaries="store"`` over a stack without checkpoints). Passwords
            are redacted.
        StorageUnavailableError: a file store cannot create its directory (SQLite opens its
            file on first use, and raises it then).
    """
    plan = resolve(to_spec(spec), registry)
    if plan.problems:
        error = config_error(plan.problems, plan.source, plan.secrets)
        raise error from error.__cause__
    return construct(plan)


def to_spec(spec: str | os.PathLike[str] | Mapping[str, Any] | StackSpec | None) -> StackSpec:
    """The parsed stack :func:`open_storage` would build from ``spec`` (same rules; with
    ``None``, the one the environment names), its store's ``url_env`` read.

    Mistakes in the configuration are kept in ``StackSpec.problems``, not raised:
    :func:`open_storage` reports them together with those resolving finds, in one error.

    Raises:
        ConfigError: both environment variables set; an empty URL; a config that is not a
            mapping; a file that cannot be read or decoded.
    """
    parsed = _parse(spec)
    return parsed if parsed.store.url_env is None else read_store_url(parsed)


def _parse(spec: str | os.PathLike[str] | Mapping[str, Any] | StackSpec | None) -> StackSpec:
    if spec is None:
        url, config = configured_source()
        if url:
            parsed = Parser().chain(url)
            parsed.source = f"{ENV_URL} ({parsed.source})"
            return parsed
        if config:
            return Parser().file(config)
        parsed = Parser().chain(DEFAULT_URL)
        parsed.source = f"default {DEFAULT_URL}"
        return parsed
    if isinstance(spec, StackSpec):
        return spec
    if isinstance(spec, os.PathLike):
        return Parser().file(spec)
    if isinstance(spec, str):
        if "://" not in spec and spec.lower().endswith((".toml", ".json")):
            return Parser().file(spec)
        return Parser().chain(spec)
    if isinstance(spec, Mapping):
        return Parser().mapping(spec, "dict")
    raise ConfigError(
        f"open_storage expects a URL, a config path or a mapping, got {type(spec).__name__}"
    )
