"""Open a stack from a URL chain, a dict or a TOML/JSON file: ``open_storage``.

The dict / TOML form (see README "Configuration" for the reference)::

    [store]
    url = "sqlite:///chats.db"        # or: type = "sqlite" and path = "chats.db"

    [[layers]]                          # outermost first
    type = "summarize"
    trigger_at = 20
    [layers.summarizer]
    type = "litellm"
    model = "gpt-4o-mini"

    [[layers]]
    type = "scrub"
    secret_env = "CHATLAYERS_PII_SECRET"

or ``url = "CHAIN"`` alone. Any option ``X`` may instead be given as ``X_env = "VARIABLE"``:
its value is read from that environment variable (an unset variable is an error). Options
ending in ``_file`` are relative to the config file's directory. Values from TOML keep their
native types and are checked against the declared ones (a number given for a string option
is refused, never guessed). Passwords (in URLs, and options named like ``secret``,
``password``, ``token``, ``api_key``) are redacted in every repr, log line, error and
``describe()`` output.

Mistakes are collected, not raised one by one: a file with several gets one ``ConfigError``
listing each with where it is (``[store]``, ``[[layers]] #2 (summarize)``,
``[[layers]] #2 (summarize), [layers.summarizer] (litellm)``); see
:mod:`storage.config.problems`. ``describe()`` names where a secret came from the same way
for every source: ``secret=env:VARIABLE`` (``secret_env`` or the scrubber's default
variable), ``secret=config`` (written in the file or URL), ``secret=argument`` (code),
``secret=random per-process``.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from storage.config.build import build
from storage.config.chain import parse_store_url, parse_url
from storage.config.options import from_env
from storage.config.problems import Problem, Problems
from storage.config.registry import Registry, did_you_mean
from storage.config.spec import ComponentSpec, StackSpec, component_from_table, nest_tables
from storage.config.stack import Stack
from storage.errors import ConfigError
from storage.redact import secrets_of_options

__all__ = [
    "DEFAULT_URL",
    "ENV_CONFIG",
    "ENV_URL",
    "load_config",
    "open_storage",
    "parse_config",
]

DEFAULT_URL: Final = "summarize::scrub::sqlite:///chatlayers.db"
"""The stack used when nothing is configured: extractive summaries over scrubbed SQLite."""
ENV_URL: Final = "CHATLAYERS_URL"
ENV_CONFIG: Final = "CHATLAYERS_CONFIG"

_TOP_KEYS: Final = ("url", "store", "layers")
_POSTGRES: Final = {"postgres", "postgresql"}


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
            or ``.json`` config file (``str`` or ``Path``), a config mapping, or ``None``.
        registry: the registry to resolve names in (default: the process-wide one).

    Raises:
        ConfigError: both environment variables set; an unknown name ("did you mean ..."); a
            missing optional driver (``pip install 'chatlayers[redis]'``); a bad option (the
            component, option and allowed values named). Passwords are redacted.
        StorageUnavailableError: a file store cannot create its directory (SQLite opens its
            file on first use, and raises it then).
    """
    return build(to_spec(spec), registry=registry)


def to_spec(spec: str | os.PathLike[str] | Mapping[str, Any] | StackSpec | None) -> StackSpec:
    """The unbuilt stack that :func:`open_storage` would build from ``spec`` (same rules).

    Mistakes found while parsing are kept in ``StackSpec.problems``, not raised:
    :func:`storage.config.build.build` (``open_storage``) reports them together with those
    it finds, in one ``ConfigError``.

    Raises:
        ConfigError: both environment variables set; a file that cannot be read or parsed.
    """
    if spec is None:
        url = os.environ.get(ENV_URL)
        config = os.environ.get(ENV_CONFIG)
        if url and config:
            raise ConfigError(f"both {ENV_URL} and {ENV_CONFIG} are set; set only one")
        if url:
            parsed = parse_url(url, defer=True)
            parsed.source = f"{ENV_URL} ({parsed.source})"
            return parsed
        if config:
            return load_config(config, defer=True)
        parsed = parse_url(DEFAULT_URL)
        parsed.source = f"default {DEFAULT_URL}"
        return parsed
    if isinstance(spec, StackSpec):
        return spec
    if isinstance(spec, os.PathLike):
        return load_config(spec, defer=True)
    if isinstance(spec, str):
        if "://" not in spec and spec.lower().endswith((".toml", ".json")):
            return load_config(spec, defer=True)
        return parse_url(spec, defer=True)
    if isinstance(spec, Mapping):
        return parse_config(spec, defer=True)
    raise ConfigError(
        f"open_storage expects a URL, a config path or a mapping, got {type(spec).__name__}"
    )


def load_config(path: str | os.PathLike[str], *, defer: bool = False) -> StackSpec:
    """Read a TOML (``.toml``) or JSON (``.json``) config file.

    Args:
        path: the file.
        defer: keep the problems of its content in ``StackSpec.problems`` (building reports
            them with its own) instead of raising them.

    Raises:
        ConfigError: the file cannot be read or parsed, or its content is not a valid config
            (every mistake found, in one error).
    """
    file = Path(path).expanduser()
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(file)!r}: {exc.strerror}") from exc
    twice: list[str] = []
    try:
        if file.suffix.lower() == ".json":
            data = json.loads(raw, object_pairs_hook=lambda pairs: _no_repeats(pairs, twice))
        else:
            data = tomllib.loads(raw.decode("utf-8"))  # TOML itself refuses a repeated key
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {str(file)!r} is not valid: {exc}") from None
    spec = parse_config(data, base_dir=file.parent, source=f"config {file}", defer=True)
    spec.problems[:0] = [Problem("", f"key {key!r} is given twice") for key in twice]
    if not defer:
        Problems(spec.problems).raise_if_any(spec.source, spec.secrets())
    return spec


def _no_repeats(pairs: list[tuple[str, Any]], twice: list[str]) -> dict[str, Any]:
    """A JSON object, noting each key given twice (``json`` would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            twice.append(key)
        out[key] = value
    return out


def parse_config(
    data: Mapping[str, Any],
    *,
    base_dir: Path | None = None,
    source: str = "dict",
    defer: bool = False,
) -> StackSpec:
    """Parse the dict form: ``{"url": CHAIN}`` or ``{"store": {...}, "layers": [...]}``.

    ``store`` is ``{"url": URL, **options}`` or ``{"type": NAME, **options}``; ``layers`` is a
    list, outermost first, of ``{"type": NAME, **options}`` or bare names; a layer's
    ``summarizer`` option is a name or ``{"type": NAME, **options}``. Every entry is read,
    and every mistake reported, in one error.

    Args:
        data: the configuration.
        base_dir: the directory ``*_file`` options are relative to.
        source: how errors name it.
        defer: keep the problems in ``StackSpec.problems`` (building reports them together
            with its own) instead of raising them.

    Raises:
        ConfigError: unknown top-level key, missing ``type``/``url``, both a chain ``url`` and
            ``store``/``layers``, or a malformed entry (the error names each).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a config must be a mapping, got {type(data).__name__}")
    problems = Problems()
    spec = _parse_mapping(data, base_dir, source, problems)
    spec.problems = problems.items
    if not defer:
        problems.raise_if_any(spec.source, spec.secrets() | secrets_of_options(data))
    return spec


def _parse_mapping(
    data: Mapping[str, Any], base_dir: Path | None, source: str, problems: Problems
) -> StackSpec:
    for key in data:
        if key not in _TOP_KEYS:
            problems.add(
                "",
                f"unknown key {key!r}{did_you_mean(str(key), _TOP_KEYS)}; "
                f"allowed: {', '.join(_TOP_KEYS)}",
            )
    if "url" in data:
        if "store" in data or "layers" in data:
            problems.add("", "give either a chain 'url' or 'store' and 'layers', not both")
            return StackSpec(_unparsed("[store]"), [], source)
        url = data["url"]
        if not isinstance(url, str):
            problems.add("", "'url' must be a string")
            return StackSpec(_unparsed("[store]"), [], source)
        try:
            spec = parse_url(url, defer=True)
        except ConfigError as exc:
            problems.add("", exc)
            return StackSpec(_unparsed("[store]"), [], source)
        spec.source = f"{source} ({spec.source})"
        problems.extend(spec.problems)
        for component in spec.layers:
            component.base_dir = base_dir
        return spec
    store_data = data.get("store")
    if store_data is None:
        problems.add("", "no [store] table (or chain 'url') is given")
        store = _unparsed("[store]")
    else:
        try:
            store = _parse_store_table(store_data, base_dir, problems)
        except ConfigError as exc:
            problems.add("[store]", exc)
            store = _unparsed("[store]")
    layers_data = data.get("layers", [])
    if not isinstance(layers_data, list):
        problems.add("", "'layers' must be a list (TOML: [[layers]] tables)")
        layers_data = []
    layers = []
    for index, item in enumerate(layers_data):
        place = f"[[layers]] #{index + 1}"
        try:
            layer = component_from_table(
                "layers", item, f"layers[{index}]", base_dir, place=place, problems=problems
            )
        except ConfigError as exc:
            problems.add(place, exc)
            continue
        layers.append(layer)
    return StackSpec(store, layers, source)


def _unparsed(place: str) -> ComponentSpec:
    """The stand-in for a store that could not be read (its problem is recorded)."""
    return ComponentSpec("stores", "", where=place, parsed=False)


def _parse_store_table(data: Any, base_dir: Path | None, problems: Problems) -> ComponentSpec:
    where = "[store]"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table")
    options = dict(data)
    url = options.pop("url", None)
    url_env = options.pop("url_env", None)
    if url_env is not None:
        if url is not None:
            raise ConfigError(f"{where}: give 'url' or 'url_env', not both")
        url = from_env(url_env, "store", "url")
    name = options.pop("type", None)
    if url is not None:
        if not isinstance(url, str):
            raise ConfigError(f"{where}: 'url' must be a string")
        if "::" in url:
            raise ConfigError(
                f"{where}: 'url' is one store URL; give a chain as the top-level 'url', "
                "or the layers as [[layers]] tables"
            )
        spec = parse_store_url(url, where, problems=problems, place=where)
        spec.where = where
        if name is not None and name != spec.name and {name, spec.name} != _POSTGRES:
            problems.add(
                where, f"{where}: type {name!r} does not match the URL scheme {spec.name!r}"
            )
        for key, value in options.items():
            if key in spec.options:
                problems.add(where, f"{where}: option {key!r} is given in the URL and the table")
                continue
            spec.options[key] = value
        spec.options = nest_tables(spec.options, where, base_dir, place=where, problems=problems)
        spec.base_dir = base_dir
        return spec
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where} needs 'url' (a store URL) or 'type' (a store name)")
    options = nest_tables(options, where, base_dir, place=where, problems=problems)
    return ComponentSpec("stores", name, options, base_dir=base_dir, where=where)
