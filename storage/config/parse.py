"""The parse pass: a URL chain, a dict or a TOML/JSON file to a ``StackSpec``, reading nothing.

Parsing is pure: it reads no environment variable, no file but the config file it is given,
and no registry. Names stay names, option values stay raw, ``X_env`` options and a store's
``url_env`` stay unread (:mod:`storage.config.resolve` does all that). Every mistake is
recorded as a :class:`~storage.config.problems.Problem` in ``StackSpec.problems`` and
parsing carries on; it raises ``ConfigError`` only for input that is no configuration at
all (an empty URL, a config that is not a mapping, a file it cannot read or decode).

URL chains are fsspec style, outermost layer first, the base store last::

    summarize::scrub::sqlite:///chats.db
    summarize?trigger_at=10&keep_last=2::scrub?mode=mask::sqlite:///chats.db
    summarize?summarizer=litellm&summarizer.model=gpt-4o-mini::redis://:PASSWORD@host:6379/0

Each layer segment is ``name[?option=value&...]``; the last segment is the store URL, kept
whole for the store's ``from_url`` (each store reads its own location and hands the query
parameters it does not declare to its driver). A nested summarizer is named by
``summarizer=NAME`` and configured by ``summarizer.OPTION=value``. Percent-encode ``?``,
``#`` and ``::`` in a path.

The dict / TOML form (docs/configuration.md is the reference)::

    [store]
    url = "sqlite:///chats.db"        # or: type (a store name) and its options; or url_env

    [[layers]]                          # outermost first
    type = "summarize"
    trigger_at = 20
    [layers.summarizer]
    type = "litellm"
    model = "gpt-4o-mini"

or ``url = "CHAIN"`` alone. Each problem names where it is: ``segment 2 (scrub)``,
``[store]``, ``[[layers]] #2 (summarize)``,
``[[layers]] #2 (summarize), [layers.summarizer] (litellm)``.
"""

from __future__ import annotations

import json as _json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl

from storage.config.problems import Problem, config_error, did_you_mean
from storage.config.registry import Kind
from storage.config.spec import NESTED, SINGULAR, ComponentSpec, StackSpec
from storage.errors import ConfigError
from storage.redact import redact_text, redact_url, secrets_of_options, secrets_of_url

__all__ = ["Parser", "load_config", "parse_config", "parse_url"]

_TOP_KEYS: Final = ("url", "store", "layers")
_STORE: Final = "[store]"


def parse_url(url: str) -> StackSpec:
    """Parse a URL chain ``layer[?opts]::...::store://location[?opts]`` (nothing is built).

    Raises:
        ConfigError: every mistake found (an empty segment, a layer segment that is not a
            name, a last segment that is not a store URL, an option given twice), in one
            error.
    """
    return _checked(Parser().chain(url), secrets_of_url(url) if isinstance(url, str) else set())


def parse_config(
    data: Mapping[str, Any], *, base_dir: Path | None = None, source: str = "dict"
) -> StackSpec:
    """Parse the dict form: ``{"url": CHAIN}`` or ``{"store": {...}, "layers": [...]}``.

    ``store`` is ``{"url": URL, **options}``, ``{"url_env": VARIABLE, **options}`` or
    ``{"type": NAME, **options}``; ``layers`` is a list, outermost first, of
    ``{"type": NAME, **options}`` or bare names; a layer's ``summarizer`` option is a name
    or ``{"type": NAME, **options}``. Names are not resolved.

    Args:
        data: the configuration.
        base_dir: the directory ``*_file`` options are relative to.
        source: how errors name it.

    Raises:
        ConfigError: unknown top-level key, missing ``type``/``url``, both a chain ``url`` and
            ``store``/``layers``, or a malformed entry (every one, in one error).
    """
    spec = Parser(base_dir).mapping(data, source)
    return _checked(spec, secrets_of_options(data))


def load_config(path: str | os.PathLike[str]) -> StackSpec:
    """Read and parse a TOML (``.toml``) or JSON (``.json``) config file.

    Raises:
        ConfigError: the file cannot be read or decoded, or its content is not a valid config
            (every mistake found, in one error).
    """
    return _checked(Parser().file(path), set())


def _checked(spec: StackSpec, secrets: set[str]) -> StackSpec:
    if spec.problems:
        error = config_error(spec.problems, spec.source, secrets | spec.secrets())
        raise error from error.__cause__
    return spec


class Parser:
    """One parse: its methods return specs and append every mistake to :attr:`problems`.

    Args:
        base_dir: the directory ``*_file`` options are relative to (the config file's).
    """

    def __init__(self, base_dir: Path | None = None) -> None:
        self.base_dir = base_dir
        self.problems: list[Problem] = []

    def _problem(self, where: str, message: str) -> None:
        self.problems.append(Problem(where, message))

    # --- URL chains ---------------------------------------------------------------------

    def chain(self, url: str) -> StackSpec:
        """The stack of a URL chain.

        Raises:
            ConfigError: ``url`` is not a non-empty string.
        """
        if not isinstance(url, str) or not url.strip():
            raise ConfigError("a stack URL must be a non-empty string such as 'sqlite:///chats.db'")
        source = f"URL {redact_text(url, secrets_of_url(url))}"
        *layer_parts, store_part = url.strip().split("::")
        layers: list[ComponentSpec] = []
        for index, part in enumerate(layer_parts):
            name, _, query = part.partition("?")
            place = f"segment {index + 1} ({name})" if name else f"segment {index + 1}"
            if not name or "/" in name or " " in name:
                self._problem(
                    place,
                    f"segment {index + 1} ({part!r}) is not a layer name; "
                    "layers come first, each as name[?option=value&...], the store URL last",
                )
                continue
            options = self._query(query, f"layer {name!r}", place)
            layers.append(ComponentSpec("layers", name, options, where=place))
        store = self.store_url(store_part, f"segment {len(layer_parts) + 1} (store URL)")
        return StackSpec(store, layers, source, self.problems)

    def store_url(self, url: str, place: str, prefix: str = "") -> ComponentSpec:
        """The store of a store URL ``scheme://location[?options]``, written at ``place``
        (``prefix``: how a problem's message names where it is written)."""
        scheme, sep, _ = url.partition("://")
        if not sep or not scheme:
            hint = ""
            if scheme and ":" not in scheme:
                hint = (
                    f" ({scheme!r} looks like a layer name; the last segment must be a store URL)"
                )
            self._problem(
                place,
                f"{prefix}the last segment {redact_url(url)!r} is not a store URL such as "
                f"'sqlite:///chats.db' or 'memory://'{hint}",
            )
            return ComponentSpec("stores", "", where=place, parsed=False)
        scheme = scheme.lower()
        _, _, query = url.partition("?")
        options = self._query(query, f"store {scheme!r}", place) if query else {}
        # The query is parsed here only; the store reads its location from the URL itself.
        return ComponentSpec(
            "stores",
            scheme,
            options,
            url=url,
            url_options=frozenset(options),
            where=place.replace("(store URL)", f"({scheme})"),
        )

    def _query(self, query: str, label: str, place: str) -> dict[str, Any]:
        options: dict[str, Any] = {}
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key in options:
                self._problem(place, f"{label}: option {key!r} is given twice")
                continue
            options[key] = value
        return self._dotted(options, label, place)

    def _dotted(self, options: dict[str, Any], label: str, place: str) -> dict[str, Any]:
        """Nest dotted options: ``summarizer=litellm&summarizer.model=x`` is the nested
        component ``litellm`` with ``model="x"``."""
        out: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for key, value in options.items():
            head, dot, rest = key.partition(".")
            if not dot:
                out[key] = value
                continue
            if head not in NESTED or not rest or "." in rest:
                self._problem(
                    place,
                    f"{label}: option {key!r}: only nested components "
                    f"({', '.join(NESTED)}) take dotted options; give mappings as JSON",
                )
                continue
            nested.setdefault(head, {})[rest] = value
        for head, sub in nested.items():
            name = out.get(head)
            if not isinstance(name, str):
                self._problem(place, f"{label}: '{head}.*' options need {head}=NAME too")
                continue
            out[head] = {"type": name, **sub}
        for head, kind in NESTED.items():
            value = out.get(head)
            if isinstance(value, str | Mapping):
                out[head] = self.nested(kind, value, f"{place}, {head}", f"{label}: {head}")
        return out

    def nested(
        self, kind: Kind, value: str | Mapping[str, Any], place: str, what: str
    ) -> ComponentSpec:
        """A nested component option of a URL (or of a spec made in code), at ``place``."""
        nested = self.component(kind, value, what, place)
        nested.where = f"{place} {nested.name!r}" if nested.parsed else place
        return nested

    # --- the dict / TOML form -----------------------------------------------------------

    def file(self, path: str | os.PathLike[str]) -> StackSpec:
        """The stack of a TOML (``.toml``) or JSON (``.json``) config file (``*_file``
        options are relative to its directory).

        Raises:
            ConfigError: the file cannot be read, or is not valid TOML / JSON.
        """
        file = Path(path).expanduser()
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {str(file)!r}: {exc.strerror}") from exc
        self.base_dir = file.parent
        is_json = file.suffix.lower() == ".json"
        return self.document(raw, f"config {file}", json=is_json, name=f"config file {str(file)!r}")

    def document(
        self, text: str | bytes, source: str, *, json: bool = False, name: str = ""
    ) -> StackSpec:
        """The stack of a TOML document (JSON with ``json``), as a config file holds it;
        ``source`` names it in errors (``name``, if given, when it cannot be decoded).

        Raises:
            ConfigError: ``text`` is not valid TOML / JSON (or UTF-8).
        """
        twice: list[str] = []
        try:
            if json:
                data = _json.loads(text, object_pairs_hook=lambda pairs: _no_repeats(pairs, twice))
            else:  # TOML itself refuses a repeated key
                data = tomllib.loads(text if isinstance(text, str) else text.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{name or source} is not valid: {exc}") from None
        for key in twice:
            self._problem("", f"key {key!r} is given twice")
        return self.mapping(data, source)

    def mapping(self, data: Mapping[str, Any], source: str) -> StackSpec:
        """The stack of the dict form.

        Raises:
            ConfigError: ``data`` is not a mapping.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: a config must be a mapping, got {type(data).__name__}")
        for key in data:
            if key not in _TOP_KEYS:
                self._problem(
                    "",
                    f"unknown key {key!r}{did_you_mean(str(key), _TOP_KEYS)}; "
                    f"allowed: {', '.join(_TOP_KEYS)}",
                )
        if "url" in data:
            return self._chain_in(data, source)
        store = self._unparsed(_STORE)
        if "store" not in data or data["store"] is None:
            self._problem("", "no [store] table (or chain 'url') is given")
        else:
            store = self._store_table(data["store"])
        layers_data = data.get("layers", [])
        if not isinstance(layers_data, list):
            self._problem("", "'layers' must be a list (TOML: [[layers]] tables)")
            layers_data = []
        layers = []
        for index, item in enumerate(layers_data):
            layer = self.component("layers", item, f"layers[{index}]", f"[[layers]] #{index + 1}")
            if layer.parsed:
                layers.append(layer)
        return StackSpec(store, layers, source, self.problems)

    def _chain_in(self, data: Mapping[str, Any], source: str) -> StackSpec:
        """A config holding ``url = CHAIN``."""
        url = data["url"]
        if "store" in data or "layers" in data:
            self._problem("", "give either a chain 'url' or 'store' and 'layers', not both")
        elif not isinstance(url, str):
            self._problem("", "'url' must be a string")
        elif not url.strip():
            self._problem("", "a stack URL must be a non-empty string such as 'sqlite:///chats.db'")
        else:
            spec = self.chain(url)
            spec.source = f"{source} ({spec.source})"
            for component in spec.layers:
                component.base_dir = self.base_dir
            return spec
        return StackSpec(self._unparsed(_STORE), [], source, self.problems)

    def _unparsed(self, place: str) -> ComponentSpec:
        """The stand-in for a store that could not be read (its problem is recorded)."""
        return ComponentSpec("stores", "", where=place, parsed=False)

    def _store_table(self, data: Any) -> ComponentSpec:
        if not isinstance(data, Mapping):
            self._problem(_STORE, f"{_STORE} must be a table")
            return self._unparsed(_STORE)
        options = dict(data)
        url = options.pop("url", None)
        url_env = options.pop("url_env", None)
        if url_env is not None:
            if url is not None:
                self._problem(_STORE, f"{_STORE}: give 'url' or 'url_env', not both")
                return self._unparsed(_STORE)
            # Resolving reads the variable, then calls store_table_url with the table.
            return ComponentSpec(
                "stores", "", options, url_env=url_env, base_dir=self.base_dir, where=_STORE
            )
        name = options.pop("type", None)
        if url is not None:
            return self.store_table_url(url, name, options)
        if not isinstance(name, str) or not name:
            self._problem(_STORE, f"{_STORE} needs 'url' (a store URL) or 'type' (a store name)")
            return self._unparsed(_STORE)
        options = self._tables(options, _STORE, _STORE)
        return ComponentSpec("stores", name, options, base_dir=self.base_dir, where=_STORE)

    def store_table_url(self, url: Any, name: Any, options: dict[str, Any]) -> ComponentSpec:
        """The ``[store]`` table's store: its ``url``, the ``type`` it may repeat, and the
        table's other options (merged with the URL's query options)."""
        if not isinstance(url, str):
            self._problem(_STORE, f"{_STORE}: 'url' must be a string")
            return self._unparsed(_STORE)
        if "::" in url:
            self._problem(
                _STORE,
                f"{_STORE}: 'url' is one store URL; give a chain as the top-level 'url', "
                "or the layers as [[layers]] tables",
            )
            return self._unparsed(_STORE)
        spec = self.store_url(url, _STORE, f"{_STORE}: ")
        if not spec.parsed:
            return spec
        spec.type_given = name  # resolving checks it names the scheme's store
        for key, value in options.items():
            if key in spec.options:
                self._problem(_STORE, f"{_STORE}: option {key!r} is given in the URL and the table")
                continue
            spec.options[key] = value
        spec.options = self._tables(spec.options, _STORE, _STORE)
        spec.base_dir = self.base_dir
        return spec

    def component(self, kind: Kind, data: Any, what: str, place: str) -> ComponentSpec:
        """A component given as a bare name or as a table ``{"type": NAME, **options}``
        (nested components inside parsed too); ``what`` names it in a problem's message
        (``"layers[0]"``), ``place`` is where it is written (``" (NAME)"`` is added). A
        component that cannot be read is returned with ``parsed=False``."""
        if isinstance(data, str):
            return ComponentSpec(kind, data, {}, base_dir=self.base_dir, where=_named(place, data))
        if not isinstance(data, Mapping):
            self._problem(place or what, f"{what} must be a table with 'type' or a name")
            return ComponentSpec(kind, "", base_dir=self.base_dir, where=place, parsed=False)
        options = dict(data)
        name = options.pop("type", None)
        if not isinstance(name, str) or not name:
            self._problem(place or what, f"{what} needs 'type' (a {SINGULAR[kind]} name)")
            return ComponentSpec(kind, "", base_dir=self.base_dir, where=place, parsed=False)
        place = _named(place, name)
        options = self._tables(options, f"{what} ({name})", place)
        return ComponentSpec(kind, name, options, base_dir=self.base_dir, where=place)

    def _tables(self, options: dict[str, Any], what: str, place: str) -> dict[str, Any]:
        """``options`` with each nested component (:data:`NESTED`) given as a name or a
        table replaced by its ``ComponentSpec`` (in place; returned for convenience): the
        nested one of ``"[[layers]] #1 (summarize)"`` is at
        ``"[[layers]] #1 (summarize), [layers.summarizer] (litellm)"``."""
        table = "store" if place.startswith(_STORE) else "layers"
        for key, kind in NESTED.items():
            value = options.get(key)
            if isinstance(value, str | Mapping):
                inner = f"{place}, [{table}.{key}]"
                options[key] = self.component(kind, value, f"{what}.{key}", inner)
        return options


def _named(place: str, name: str) -> str:
    return f"{place} ({name})" if place else ""


def _no_repeats(pairs: list[tuple[str, Any]], twice: list[str]) -> dict[str, Any]:
    """A JSON object, noting each key given twice (``json`` would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            twice.append(key)
        out[key] = value
    return out
