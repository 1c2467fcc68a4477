"""Build a stack from a URL chain, a dict or a TOML file: ``open_storage``.

URL chains (fsspec style, outermost layer first, the base store last)::

    summarize::scrub::sqlite:///chats.db
    summarize?trigger_at=10&keep_last=2::scrub?mode=mask::sqlite:///chats.db
    summarize?summarizer=litellm&summarizer.model=gpt-4o-mini::redis://:PASSWORD@host:6379/0

Each layer segment is ``name[?option=value&...]``; the last segment is the store URL, whose
query options are the store's constructor options (a Redis or PostgreSQL URL keeps the query
parameters the store does not declare, for its driver). A nested summarizer is named by
``summarizer=NAME`` and configured by ``summarizer.OPTION=value``. Option values from a URL
are strings converted by the declared type of the factory's parameter: ``int``, ``float``,
``bool`` (``true/false/1/0/yes/no/on/off``), ``Literal`` choices, lists (comma-separated or a
JSON list), mappings (a JSON object) and callables (``module:attr``). Values from TOML keep
their native types and are checked against the same declarations (a number given for a string
option is refused, never guessed).

Store URLs: ``memory://``; ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``,
``sqlite://:memory:`` (SQLAlchemy's form); ``jsonl://relative/dir``, ``jsonl:///absolute/dir``
(a file URL: everything after ``jsonl://`` is the path); ``redis://[:password@]host:port/db``, ``rediss://...``;
``postgresql://user:password@host:port/db`` (``postgres://`` too). Relative paths are relative
to the working directory; percent-encode ``?``, ``#`` and ``::`` in a path.

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

Any option ``X`` may instead be given as ``X_env = "VARIABLE"``: its value is read from that
environment variable (an unset variable is an error). Options ending in ``_file`` are relative
to the config file's directory. Passwords (in URLs, and options named like ``secret``,
``password``, ``token``, ``api_key``) are redacted in every repr, log line, error and
``describe()`` output.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import sys
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar, Union
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

import attrs

from storage.errors import ChatStorageError, ConfigError
from storage.protocol import PROTOCOL_METHODS, ChatStorage, ChatStorageWrapper
from storage.registry import Kind, Registry, did_you_mean, import_target
from storage.registry import registry as default_registry

__all__ = [
    "DEFAULT_URL",
    "ENV_CONFIG",
    "ENV_URL",
    "ComponentSpec",
    "Stack",
    "StackSpec",
    "build",
    "components",
    "describe",
    "describe_lines",
    "load_config",
    "open_storage",
    "parse_config",
    "parse_url",
    "redact_text",
    "redact_url",
]

log = logging.getLogger(__name__)

DEFAULT_URL: Final = "summarize::scrub::sqlite:///chatlayers.db"
"""The stack used when nothing is configured: extractive summaries over scrubbed SQLite."""
ENV_URL: Final = "CHATLAYERS_URL"
ENV_CONFIG: Final = "CHATLAYERS_CONFIG"

# Stores whose URL points at a file or directory: the path is their first parameter.
_PATH_SCHEMES: Final = frozenset({"sqlite", "jsonl"})
# Stores that take no location.
_NO_LOCATION_SCHEMES: Final = frozenset({"memory"})
# Options that are themselves components, built from the named registry kind.
NESTED: Final[Mapping[str, Kind]] = {"summarizer": "summarizers"}
_TOP_KEYS: Final = ("url", "store", "layers")
_POSTGRES: Final = {"postgres", "postgresql"}
_SENSITIVE = re.compile(r"secret|passw|pwd|token|api_?key|credential|^key$|_key$", re.I)
_URL_PASSWORD = re.compile(r"(?P<pre>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)(?P<pw>[^\s/?#]*)@")
_QUERY_PARAM = re.compile(r"""(?P<sep>[?&])(?P<key>[^=&?:\s]+)=(?P<value>[^&\s:'"(){}\[\],]*)""")
_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})
REDACTED: Final = "***"

T = TypeVar("T")


# --- redaction ----------------------------------------------------------------------------


def is_sensitive(name: str) -> bool:
    """True for an option or query parameter name that holds a secret (``password``, ``token``)."""
    return bool(_SENSITIVE.search(name))


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
    """``text`` with URL passwords redacted and every string of ``secrets`` replaced by ``***``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return redact_url(text)


def _secrets_of_url(url: str) -> set[str]:
    found: set[str] = set()
    for match in _URL_PASSWORD.finditer(url):
        if match["pw"]:
            found.update({match["pw"], unquote(match["pw"])})
    for segment in url.split("::"):
        _, _, query = segment.partition("?")
        for key, value in parse_qsl(query, keep_blank_values=True):
            if is_sensitive(key) and value:
                found.update({value, quote(value, safe="")})
    return found


def _secrets_of_options(options: Mapping[str, Any]) -> set[str]:
    found: set[str] = set()
    for name, value in options.items():
        if isinstance(value, str):
            if is_sensitive(name) and value:
                found.add(value)
            if "://" in value:
                found |= _secrets_of_url(value)
            if value.lstrip().startswith("{"):  # a mapping given as JSON in a URL
                try:
                    decoded = json.loads(value)
                except ValueError:
                    decoded = None
                if isinstance(decoded, Mapping):
                    found |= _secrets_of_options(decoded)
        elif isinstance(value, Mapping):
            found |= _secrets_of_options(value)
        elif isinstance(value, list | tuple):
            for item in value:
                found |= _secrets_of_options({name: item})
    return found


def _redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in options.items():
        if isinstance(value, Mapping):
            out[name] = _redact_options(value)
        elif is_sensitive(name) and value is not None and not name.endswith("_env"):
            out[name] = REDACTED
        elif isinstance(value, str):
            out[name] = redact_url(value)
        else:
            out[name] = value
    return out


# --- the parsed form ----------------------------------------------------------------------


@attrs.define
class ComponentSpec:
    """One store, layer or summarizer of a stack, before it is built.

    Attributes:
        kind: ``"stores"``, ``"layers"`` or ``"summarizers"``.
        name: the registry name (or ``"module:attr"``).
        options: raw options: strings from a URL, native values from TOML or a dict; a nested
            component (``summarizer``) is a ``ComponentSpec``.
        url: the store URL (stores only; ``None`` when built from ``type`` and options). Holds
            the password: never print it, use :func:`redact_url`.
        base_dir: directory that ``*_file`` options are relative to (the config file's).
    """

    kind: Kind
    name: str
    options: dict[str, Any] = attrs.field(factory=dict)
    url: str | None = attrs.field(default=None, repr=lambda u: repr(redact_url(u)) if u else "None")
    base_dir: Path | None = None

    @property
    def label(self) -> str:
        """``layer 'scrub'``: how errors name this component."""
        singular = {"stores": "store", "layers": "layer", "summarizers": "summarizer"}[self.kind]
        return f"{singular} {self.name!r}"

    def __repr__(self) -> str:
        url = f", url={redact_url(self.url)!r}" if self.url else ""
        return (
            f"ComponentSpec(kind={self.kind!r}, name={self.name!r}, "
            f"options={_redact_options(self._plain_options())!r}{url})"
        )

    def _plain_options(self) -> dict[str, Any]:
        return {
            k: (v._plain_options() | {"type": v.name} if isinstance(v, ComponentSpec) else v)
            for k, v in self.options.items()
        }

    def secrets(self) -> set[str]:
        """Every secret string this spec holds (URL passwords, sensitive option values)."""
        found = _secrets_of_url(self.url) if self.url else set()
        found |= _secrets_of_options(self._plain_options())
        return found


@attrs.define
class StackSpec:
    """A whole stack before it is built: the base store and the layers, outermost first.

    Attributes:
        store: the base store.
        layers: the layers, outermost first.
        source: where it came from, redacted (``"URL summarize::sqlite:///x.db"``).
    """

    store: ComponentSpec
    layers: list[ComponentSpec] = attrs.field(factory=list)
    source: str = "dict"

    def secrets(self) -> set[str]:
        """Every secret string of the stack (redacted from every message)."""
        found = self.store.secrets()
        for layer in self.layers:
            found |= layer.secrets()
        return found


# --- URL chains ---------------------------------------------------------------------------


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


def parse_url(url: str) -> StackSpec:
    """Parse a URL chain ``layer[?opts]::...::store://location[?opts]``.

    Raises:
        ConfigError: an empty segment, a layer segment that is not a name, a last segment that
            is not a store URL, or an option given twice.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("a stack URL must be a non-empty string such as 'sqlite:///chats.db'")
    secrets = _secrets_of_chain(url)
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
        store = _parse_store_url(store_part, source)
    except ConfigError as exc:
        raise ConfigError(redact_text(str(exc), secrets)) from None
    return StackSpec(store, layers, source)


def _secrets_of_chain(url: str) -> set[str]:
    """Every secret of a URL chain, found leniently (before it is validated)."""
    found = _secrets_of_url(url)
    for segment in url.split("::"):
        _, _, query = segment.partition("?")
        found |= _secrets_of_options(dict(parse_qsl(query, keep_blank_values=True)))
    return found


def _parse_store_url(url: str, source: str) -> ComponentSpec:
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


def _location_path(url: str, scheme: str) -> str:
    """The file path of a ``sqlite`` or ``jsonl`` URL.

    ``sqlite`` follows SQLAlchemy: ``sqlite:///relative.db``, ``sqlite:////absolute.db``,
    ``sqlite://:memory:``. ``jsonl`` follows file URLs (DESIGN §4 ``jsonl://PATH``): everything
    after ``jsonl://`` is the path, so ``jsonl://chats`` is relative and ``jsonl:///var/chats``
    absolute.
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


def _strip_query(url: str, drop: Iterable[str]) -> str:
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


# --- dict and TOML ------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> StackSpec:
    """Read a TOML (``.toml``) or JSON (``.json``) config file.

    Raises:
        ConfigError: the file cannot be read or parsed, or its content is not a valid config.
    """
    file = Path(path).expanduser()
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(file)!r}: {exc.strerror}") from exc
    try:
        if file.suffix.lower() == ".json":
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {str(file)!r} is not valid: {exc}") from None
    return parse_config(data, base_dir=file.parent, source=f"config {file}")


def parse_config(
    data: Mapping[str, Any], *, base_dir: Path | None = None, source: str = "dict"
) -> StackSpec:
    """Parse the dict form: ``{"url": CHAIN}`` or ``{"store": {...}, "layers": [...]}``.

    ``store`` is ``{"url": URL, **options}`` or ``{"type": NAME, **options}``; ``layers`` is a
    list, outermost first, of ``{"type": NAME, **options}`` or bare names; a layer's
    ``summarizer`` option is a name or ``{"type": NAME, **options}``.

    Raises:
        ConfigError: unknown top-level key, missing ``type``/``url``, both a chain ``url`` and
            ``store``/``layers``, or a malformed entry (the error names it).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a config must be a mapping, got {type(data).__name__}")
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(
                f"{source}: unknown key {key!r}{did_you_mean(str(key), _TOP_KEYS)}; "
                f"allowed: {', '.join(_TOP_KEYS)}"
            )
    if "url" in data:
        if "store" in data or "layers" in data:
            raise ConfigError(
                f"{source}: give either a chain 'url' or 'store' and 'layers', not both"
            )
        url = data["url"]
        if not isinstance(url, str):
            raise ConfigError(f"{source}: 'url' must be a string")
        spec = parse_url(url)
        spec.source = f"{source} ({spec.source})"
        for component in spec.layers:
            component.base_dir = base_dir
        return spec
    store_data = data.get("store")
    if store_data is None:
        raise ConfigError(f"{source}: no [store] table (or chain 'url') is given")
    store = _parse_store_table(store_data, source, base_dir)
    layers_data = data.get("layers", [])
    if not isinstance(layers_data, list):
        raise ConfigError(f"{source}: 'layers' must be a list (TOML: [[layers]] tables)")
    layers = [
        _parse_component_table("layers", item, f"{source}: layers[{index}]", base_dir)
        for index, item in enumerate(layers_data)
    ]
    return StackSpec(store, layers, source)


def _parse_store_table(data: Any, source: str, base_dir: Path | None) -> ComponentSpec:
    where = f"{source}: [store]"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table")
    options = dict(data)
    url = options.pop("url", None)
    url_env = options.pop("url_env", None)
    if url_env is not None:
        if url is not None:
            raise ConfigError(f"{where}: give 'url' or 'url_env', not both")
        url = _from_env(url_env, "store", "url")
    name = options.pop("type", None)
    if url is not None:
        if not isinstance(url, str):
            raise ConfigError(f"{where}: 'url' must be a string")
        if "::" in url:
            raise ConfigError(
                f"{where}: 'url' is one store URL; give a chain as the top-level 'url', "
                "or the layers as [[layers]] tables"
            )
        spec = _parse_store_url(url, where)
        if name is not None and name != spec.name and {name, spec.name} != _POSTGRES:
            raise ConfigError(f"{where}: type {name!r} does not match the URL scheme {spec.name!r}")
        for key, value in options.items():
            if key in spec.options:
                raise ConfigError(f"{where}: option {key!r} is given in the URL and the table")
            spec.options[key] = value
        spec.options = _nest_tables(spec.options, where, base_dir)
        spec.base_dir = base_dir
        return spec
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where} needs 'url' (a store URL) or 'type' (a store name)")
    return ComponentSpec("stores", name, _nest_tables(options, where, base_dir), base_dir=base_dir)


def _parse_component_table(
    kind: Kind, data: Any, where: str, base_dir: Path | None
) -> ComponentSpec:
    if isinstance(data, str):
        return ComponentSpec(kind, data, {}, base_dir=base_dir)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table with 'type' or a name")
    options = dict(data)
    name = options.pop("type", None)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where} needs 'type' (a {kind[:-1]} name)")
    return ComponentSpec(
        kind, name, _nest_tables(options, f"{where} ({name})", base_dir), base_dir=base_dir
    )


def _nest_tables(options: dict[str, Any], where: str, base_dir: Path | None) -> dict[str, Any]:
    for key, kind in NESTED.items():
        value = options.get(key)
        if isinstance(value, str | Mapping):
            options[key] = _parse_component_table(kind, value, f"{where}.{key}", base_dir)
    return options


# --- building -----------------------------------------------------------------------------


@attrs.frozen
class _Param:
    name: str
    annotation: Any
    required: bool


def _type_hints(obj: Any) -> dict[str, Any]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    globalns = vars(module) if module is not None else None
    try:
        return typing.get_type_hints(target, globalns=globalns)
    except Exception:
        # Names imported under TYPE_CHECKING: resolve what can be resolved, the rest is Any.
        hints: dict[str, Any] = {}
        for name, annotation in getattr(target, "__annotations__", {}).items():
            if isinstance(annotation, str):
                try:
                    annotation = eval(annotation, dict(globalns or {}))
                except Exception:
                    annotation = Any
            hints[name] = annotation
        return hints


def declared_options(factory: Any, *, skip_first: bool) -> tuple[dict[str, _Param], bool]:
    """The keyword options ``factory`` declares (name → type, required) and whether it takes
    ``**kwargs`` that nothing describes (then unknown options pass through unconverted)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return {}, True
    hints = _type_hints(factory)
    params: dict[str, _Param] = {}
    open_kwargs = False
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    skipped = positional[0].name if skip_first and positional else None
    for p in signature.parameters.values():
        if p.name == skipped or p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            continue
        if p.kind is p.VAR_KEYWORD:
            open_kwargs = True
            continue
        params[p.name] = _Param(p.name, hints.get(p.name, Any), p.default is p.empty)
    forwards = getattr(factory, "chatlayers_forwards_to", None)
    if open_kwargs and forwards is not None:
        target = import_target(forwards, what="options") if isinstance(forwards, str) else forwards
        more, open_kwargs = declared_options(target, skip_first=False)
        for name, param in more.items():
            if name not in params:
                params[name] = attrs.evolve(param, required=False)
    return params, open_kwargs


def _from_env(variable: Any, label: str, option: str) -> str:
    if not isinstance(variable, str) or not variable:
        raise ConfigError(f"{label}: {option}_env must name an environment variable")
    value = os.environ.get(variable)
    if value is None:
        raise ConfigError(f"{label}: {option}_env names {variable!r}, which is not set")
    return value


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("collections.abc.", "")


def convert(value: Any, annotation: Any, where: str) -> Any:
    """Convert an option value to its declared type.

    Strings (from URLs and environment variables) are parsed; native values (TOML, dicts) are
    checked, never reinterpreted (a TOML integer for a string option is refused).

    Raises:
        ConfigError: the value does not fit the type; for ``Literal`` choices the allowed
            values are listed.
    """
    if annotation is Any or annotation is inspect.Parameter.empty:
        return value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        errors: list[str] = []
        for member in args:
            if member is type(None):
                continue
            try:
                return convert(value, member, where)
            except ConfigError as exc:
                errors.append(str(exc))
        choices = [a for a in args if a is not type(None)]
        if len(errors) == 1:
            raise ConfigError(errors[0])
        raise ConfigError(
            f"{where} must be {' or '.join(_type_name(c) for c in choices)}, got {value!r}"
        )
    if origin is typing.Literal:
        for choice in args:
            candidate = value
            if isinstance(value, str) and not isinstance(choice, str):
                try:
                    candidate = convert(value, type(choice), where)
                except ConfigError:
                    continue
            if candidate == choice and type(candidate) is type(choice):
                return candidate
        raise ConfigError(
            f"{where} must be one of {', '.join(repr(c) for c in args)}; got {value!r}"
        )
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ConfigError(f"{where} must be a boolean (true or false), got {value!r}")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    if annotation is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ConfigError(
            f"{where} must be a string, got {type(value).__name__} {value!r} (quote it)"
        )
    if annotation is bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            return value.encode("utf-8")
        raise ConfigError(f"{where} must be a string, got {type(value).__name__}")
    if annotation is Path or origin is os.PathLike or annotation is os.PathLike:
        if isinstance(value, str | os.PathLike):
            return Path(value) if annotation is Path else value
        raise ConfigError(f"{where} must be a path string, got {type(value).__name__}")
    if origin in (list, tuple, set, frozenset) or _is_abc(
        origin, ("Sequence", "Iterable", "Collection", "Set", "MutableSequence")
    ):
        return _convert_collection(value, origin, args, where)
    if origin in (dict,) or _is_abc(origin, ("Mapping", "MutableMapping")):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ConfigError(f"{where} must be a JSON object, got {value!r}") from None
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a table/mapping, got {type(value).__name__}")
        value_type = args[1] if len(args) == 2 else Any
        return {str(k): convert(v, value_type, f"{where}[{k!r}]") for k, v in value.items()}
    if _is_abc(origin or annotation, ("Callable",)):
        if callable(value):
            return value
        if isinstance(value, str) and ":" in value:
            return import_target(value, what=where)
        raise ConfigError(f"{where} must be a 'module:function' reference, got {value!r}")
    if isinstance(annotation, type):
        try:
            if isinstance(value, annotation):
                return value
        except TypeError:  # a non-runtime Protocol
            return value
        raise ConfigError(f"{where} must be {annotation.__name__}, got {type(value).__name__}")
    return value


def _is_abc(origin: Any, names: tuple[str, ...]) -> bool:
    return (
        getattr(origin, "__module__", "") in ("collections.abc", "typing")
        and getattr(origin, "__name__", "") in names
    )


def _convert_collection(value: Any, origin: Any, args: tuple[Any, ...], where: str) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise ConfigError(f"{where} must be a JSON list, got {value!r}") from None
        else:
            value = [item.strip() for item in text.split(",") if item.strip()]
    if isinstance(value, Mapping) or not isinstance(value, list | tuple | set | frozenset):
        raise ConfigError(f"{where} must be a list, got {type(value).__name__}")
    item_type = args[0] if args and (len(args) == 1 or args[1] is Ellipsis) else Any
    items = [convert(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:
        return tuple(items)
    if origin in (set, frozenset) or _is_abc(origin, ("Set",)):
        return frozenset(items) if origin is frozenset else set(items)
    return items


@attrs.define
class _Plan:
    """A component resolved and its options converted: ready to construct."""

    spec: ComponentSpec
    factory: Callable[..., Any]
    args: list[Any]
    kwargs: dict[str, Any]


def _plan(spec: ComponentSpec, reg: Registry, secrets: set[str]) -> _Plan:
    factory = reg.resolve(spec.kind, spec.name)
    args: list[Any] = []
    options = dict(spec.options)
    passthrough_query = False
    use_from_url = False
    if spec.kind == "stores" and spec.url is not None:
        scheme = spec.name
        use_from_url = callable(getattr(factory, "from_url", None))
        if scheme in _PATH_SCHEMES:
            args.append(_location_path(spec.url, scheme))
            use_from_url = False
        elif scheme in _NO_LOCATION_SCHEMES or not (use_from_url or _takes_positional(factory)):
            parts = urlsplit(spec.url)
            if parts.netloc or parts.path.strip("/"):
                raise ConfigError(f"store {scheme!r}: {scheme}:// takes no location")
            use_from_url = False
        else:
            passthrough_query = True
    declared, open_kwargs = declared_options(
        factory.from_url if use_from_url else factory,
        skip_first=spec.kind == "layers" or bool(args) or passthrough_query,
    )
    # X_env options: read X from the environment.
    for key in [k for k in options if k.endswith("_env")]:
        target = key[: -len("_env")]
        if target in declared or (open_kwargs and target):
            if target in options:
                raise ConfigError(f"{spec.label}: give {target!r} or {key!r}, not both")
            options[target] = _from_env(options.pop(key), spec.label, target)
            if is_sensitive(target):
                secrets.add(options[target])
    kwargs: dict[str, Any] = {}
    url_query_keys = set(_query_keys(spec.url)) if spec.url else set()
    for name, value in options.items():
        param = declared.get(name)
        if param is None:
            if passthrough_query and name in url_query_keys:
                continue  # a driver parameter (sslmode=...), left in the URL
            if not open_kwargs:
                allowed = ", ".join(sorted(declared)) or "none"
                raise ConfigError(
                    f"{spec.label} has no option {name!r}{did_you_mean(name, declared)}; "
                    f"allowed: {allowed}"
                )
            kwargs[name] = value
            continue
        if name in NESTED and isinstance(value, ComponentSpec | str | Mapping):
            nested = (
                value
                if isinstance(value, ComponentSpec)
                else _parse_component_table(
                    NESTED[name], value, f"{spec.label}: {name}", spec.base_dir
                )
            )
            kwargs[name] = _plan(nested, reg, secrets)
            continue
        if name.endswith("_file") and isinstance(value, str) and spec.base_dir is not None:
            value = str(spec.base_dir / Path(value).expanduser())
        kwargs[name] = convert(value, param.annotation, f"{spec.label}: option {name!r}")
    for name, param in declared.items():
        if param.required and name not in kwargs:
            raise ConfigError(f"{spec.label} needs option {name!r}")
    if passthrough_query and spec.url is not None:
        args.append(_strip_query(spec.url, (k for k in options if k in declared)))
    return _Plan(spec, factory.from_url if use_from_url else factory, args, kwargs)


def _takes_positional(factory: Any) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _query_keys(url: str) -> list[str]:
    return [key for key, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)]


def _construct(plan: _Plan, secrets: set[str], *inner: Any) -> Any:
    kwargs = {
        k: _construct(v, secrets) if isinstance(v, _Plan) else v for k, v in plan.kwargs.items()
    }
    try:
        return plan.factory(*inner, *plan.args, **kwargs)
    except ConfigError as exc:
        error = _scrubbed(ConfigError, f"{plan.spec.label}: {exc}", exc, secrets)
    except ChatStorageError as exc:
        error = _scrubbed(type(exc), str(exc), exc, secrets)
    except ImportError as exc:
        error = _scrubbed(
            ConfigError, f"{plan.spec.label}: a module it needs is missing: {exc}", exc, secrets
        )
    except (ValueError, TypeError) as exc:
        error = _scrubbed(ConfigError, f"{plan.spec.label}: {exc}", exc, secrets)
    raise error from error.__cause__


def _scrubbed(
    cls: type[ChatStorageError], message: str, original: BaseException, secrets: set[str]
) -> ChatStorageError:
    """A new error of ``cls`` with secrets redacted; the original is kept as ``__cause__`` only
    when its own text holds no secret (a traceback prints the cause)."""
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


def _check_storage(component: object, plan: _Plan) -> None:
    if not isinstance(component, ChatStorage):
        missing = [
            name
            for name in (*PROTOCOL_METHODS, "__aenter__", "__aexit__")
            if not callable(getattr(component, name, None))
        ]
        raise ConfigError(
            f"{plan.spec.label} built a {type(component).__name__}, which is not a ChatStorage"
            + (f" (missing: {', '.join(missing)})" if missing else "")
        )


def build(spec: StackSpec, *, registry: Registry | None = None) -> Stack:
    """Build the stack described by ``spec``: resolve every name and convert every option
    first, then construct the store and wrap the layers around it, innermost first.

    Raises:
        ConfigError: unknown name, missing driver, bad option (nothing is constructed).
        StorageUnavailableError: the store cannot open its file (network stores connect
            lazily, on first use).
    """
    reg = registry if registry is not None else default_registry
    secrets = spec.secrets()
    try:
        store_plan = _plan(spec.store, reg, secrets)
        layer_plans = [_plan(layer, reg, secrets) for layer in spec.layers]
    except ConfigError as exc:
        error = _scrubbed(ConfigError, f"{spec.source}: {exc}", exc, secrets)
        raise error from error.__cause__
    top: Any = _construct(store_plan, secrets)
    _check_storage(top, store_plan)
    for plan in reversed(layer_plans):
        top = _construct(plan, secrets, top)
        _check_storage(top, plan)
    stack = Stack(top, source=spec.source, secrets=secrets)
    log.debug("built stack from %s: %s", spec.source, " | ".join(describe_lines(stack)))
    return stack


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
        StorageUnavailableError: a file store cannot open its file.
    """
    return build(_to_spec(spec), registry=registry)


def _to_spec(spec: str | os.PathLike[str] | Mapping[str, Any] | StackSpec | None) -> StackSpec:
    if spec is None:
        url = os.environ.get(ENV_URL)
        config = os.environ.get(ENV_CONFIG)
        if url and config:
            raise ConfigError(f"both {ENV_URL} and {ENV_CONFIG} are set; set only one")
        if url:
            parsed = parse_url(url)
            parsed.source = f"{ENV_URL} ({parsed.source})"
            return parsed
        if config:
            return load_config(config)
        parsed = parse_url(DEFAULT_URL)
        parsed.source = f"default {DEFAULT_URL}"
        return parsed
    if isinstance(spec, StackSpec):
        return spec
    if isinstance(spec, os.PathLike):
        return load_config(spec)
    if isinstance(spec, str):
        if "://" not in spec and spec.lower().endswith((".toml", ".json")):
            return load_config(spec)
        return parse_url(spec)
    if isinstance(spec, Mapping):
        return parse_config(spec)
    raise ConfigError(
        f"open_storage expects a URL, a config path or a mapping, got {type(spec).__name__}"
    )


# --- the built stack ----------------------------------------------------------------------


def components(stack: object) -> list[object]:
    """Every component of a stack, outermost first, following ``.inner`` (a ``Stack`` itself
    is skipped)."""
    out: list[object] = []
    current: object | None = stack.inner if isinstance(stack, Stack) else stack
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        out.append(current)
        current = getattr(current, "inner", None)
    return out


def describe_lines(stack: object, secrets: Iterable[str] = ()) -> list[str]:
    """One line per component, outermost first, each from its ``describe()`` (redacted)."""
    if isinstance(stack, Stack):
        secrets = {*secrets, *stack._secrets}
    secret_set = set(secrets)
    lines = []
    for component in components(stack):
        own = getattr(component, "describe", None)
        text = own() if callable(own) else type(component).__name__
        lines.append(redact_text(str(text), secret_set))
    return lines


def describe(stack: object) -> str:
    """The composed stack, outermost first, one line per component, secrets redacted."""
    return "\n".join(describe_lines(stack))


class Stack(ChatStorageWrapper):
    """A built stack: a ``ChatStorage`` that forwards to its outermost layer.

    ``async with`` closes every component (``aclose`` runs down the chain).

    Attributes:
        inner: the outermost layer (or the store when there is no layer).
        source: where the stack came from (redacted).
    """

    def __init__(self, top: ChatStorage, *, source: str = "", secrets: Iterable[str] = ()) -> None:
        super().__init__(top)
        self.source = source
        self._secrets = frozenset(secrets)

    @property
    def base(self) -> ChatStorage:
        """The innermost store, holding the raw (scrubbed) record."""
        return typing.cast(ChatStorage, components(self)[-1])

    def components(self) -> list[object]:
        """Every component, outermost first."""
        return components(self)

    def find(self, cls: type[T]) -> T | None:
        """The outermost component that is an instance of ``cls``, or ``None``."""
        for component in components(self):
            if isinstance(component, cls):
                return component
        return None

    def find_all(self, predicate: Callable[[object], bool]) -> Iterator[object]:
        """Components for which ``predicate`` is true, outermost first."""
        return (c for c in components(self) if predicate(c))

    def describe(self) -> str:
        """The whole stack, outermost first, one line per component, secrets redacted."""
        return "\n".join(describe_lines(self))

    def __repr__(self) -> str:
        return f"<Stack {' | '.join(describe_lines(self))}>"
