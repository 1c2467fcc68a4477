"""Names of stores, layers and summarizers, resolved lazily to the code that builds them.

A registry maps a name (``"sqlite"``, ``"scrub"``, ``"litellm"``) to a ``"module:attr"`` string
that is imported only when a stack uses the name, so ``import storage`` never imports a driver
(redis, asyncpg, litellm). Third parties add names through entry points in the groups
``chatlayers.stores``, ``chatlayers.layers`` and ``chatlayers.summarizers``; the value of an
entry point is the ``"module:attr"`` of the factory::

    # pyproject.toml of a third-party package
    [project.entry-points."chatlayers.layers"]
    encrypt = "mypkg.layers:EncryptingChatStorage"

Calling conventions of the factories (``storage.config`` converts options by the factory's
declared parameter types):

- store: ``factory(**options)``; from a URL, ``factory.from_url(url, **options)`` when the
  factory has it, else the URL is its first parameter (see ``storage.config``).
- layer: ``factory(inner, **options)`` returning a ``ChatStorage``.
- summarizer: ``factory(**options)`` returning a ``ChatSummarizer``.

A name is registered once: a second registration raises ``ConfigError`` unless
``clobber=True`` (an entry point that reuses a taken name is ignored with a warning, so an
installed package cannot silently replace a built-in).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final, Literal

import attrs

from storage.config.problems import did_you_mean
from storage.errors import ConfigError

__all__ = [
    "KINDS",
    "Entry",
    "Kind",
    "Registry",
    "did_you_mean",
    "registry",
]

log = logging.getLogger(__name__)

Kind = Literal["stores", "layers", "summarizers"]
KINDS: Final[tuple[Kind, ...]] = ("stores", "layers", "summarizers")
_SINGULAR: Final = {"stores": "store", "layers": "layer", "summarizers": "summarizer"}
ENTRY_POINT_GROUPS: Final = {kind: f"chatlayers.{kind}" for kind in KINDS}


@attrs.frozen
class Entry:
    """One registered name.

    Attributes:
        name: the name used in URLs and config (``"sqlite"``).
        target: ``"module:attr"`` (imported on first use) or the factory itself.
        extra: the pip extra that installs the driver (``"redis"``), named in the error when
            one of ``requires`` is missing.
        requires: top-level modules the factory needs, checked before importing it.
        origin: ``"builtin"``, ``"entry point <dist>"`` or ``"register()"``.
    """

    name: str
    target: str | Callable[..., Any]
    extra: str | None = None
    requires: tuple[str, ...] = ()
    origin: str = "register()"


def _builtin(name: str, target: str, extra: str | None = None, *requires: str) -> Entry:
    return Entry(name, target, extra, tuple(requires), "builtin")


BUILTINS: Final[dict[Kind, tuple[Entry, ...]]] = {
    "stores": (
        _builtin("memory", "storage.stores.memory:InMemoryChatStorage"),
        _builtin("sqlite", "storage.stores.sqlite:SQLiteChatStorage"),
        _builtin("jsonl", "storage.stores.jsonl:JsonlChatStorage"),
        _builtin("redis", "storage.stores.redis:RedisChatStorage", "redis", "redis"),
        _builtin("rediss", "storage.stores.redis:RedisChatStorage", "redis", "redis"),
        _builtin(
            "postgresql", "storage.stores.postgres:PostgresChatStorage", "postgres", "asyncpg"
        ),
        _builtin("postgres", "storage.stores.postgres:PostgresChatStorage", "postgres", "asyncpg"),
    ),
    "layers": (
        _builtin(
            "encrypt", "storage.layers.encrypting:EncryptingChatStorage", "encrypt", "cryptography"
        ),
        _builtin("mirror", "storage.layers.mirroring:MirrorChatStorage"),
        _builtin("otel", "storage.layers.otel:TelemetryChatStorage", "otel", "opentelemetry"),
        _builtin("scrub", "storage.layers.scrubbing:scrub_layer"),
        _builtin("strict", "storage.layers.strict:StrictViewChatStorage"),
        _builtin("summarize", "storage.layers.summarizing:SummarizingChatStorage"),
        _builtin("transform", "storage.layers.transforming:TransformingChatStorage"),
    ),
    "summarizers": (
        _builtin("extractive", "summarizers.extractive:ExtractiveSummarizer"),
        _builtin("litellm", "summarizers.llm:LiteLLMSummarizer", "llm", "litellm"),
    ),
}


def import_target(target: str, *, what: str) -> Any:
    """Import ``"module:attr"`` (``attr`` may be dotted).

    Raises:
        ConfigError: the string is not ``module:attr``, or the module or attribute is missing.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what}: {target!r} is not of the form 'module:attr'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import {module_name!r} ({exc})") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{what}: module {module_name!r} has no attribute {attr!r}") from None
    return obj


class Registry:
    """Name → factory maps for stores, layers and summarizers, with entry-point discovery.

    Args:
        builtins: register the built-in names (default ``True``).
        entry_points: discover third-party names from entry points on first lookup (default
            ``True``). Discovery runs once per registry; :meth:`refresh` runs it again.

    Attributes:
        generation: changes whenever a name is registered or removed (a caller keeping a
            factory it resolved knows, by an attribute read, whether it is still current).
    """

    def __init__(self, *, builtins: bool = True, entry_points: bool = True) -> None:
        self._entries: dict[Kind, dict[str, Entry]] = {kind: {} for kind in KINDS}
        self._loaded: dict[tuple[Kind, str], Any] = {}
        self._use_entry_points = entry_points
        self.generation = 0
        self._entry_points_loaded = not entry_points
        if builtins:
            for kind, entries in BUILTINS.items():
                for entry in entries:
                    self._entries[kind][entry.name] = entry

    def register(
        self,
        kind: Kind,
        name: str,
        target: str | Callable[..., Any],
        *,
        extra: str | None = None,
        requires: Iterable[str] = (),
        clobber: bool = False,
    ) -> None:
        """Register ``name`` for a store, layer or summarizer factory.

        Args:
            kind: ``"stores"``, ``"layers"`` or ``"summarizers"``.
            name: the name used in URLs and config; for a store, its URL scheme.
            target: ``"module:attr"`` (imported lazily) or the factory itself.
            extra: the pip extra that installs the driver, for the error hint.
            requires: modules to check before importing ``target``.
            clobber: replace an existing registration instead of refusing it.

        Raises:
            ConfigError: unknown ``kind``, an invalid name, or ``name`` already registered
                and ``clobber`` is false.
        """
        table = self._table(kind)
        if not name or not isinstance(name, str) or any(c in name for c in ":?/ "):
            raise ConfigError(f"invalid {_SINGULAR[kind]} name {name!r}")
        self._discover()
        if name in table and not clobber:
            raise ConfigError(
                f"{_SINGULAR[kind]} {name!r} is already registered "
                f"({table[name].origin}: {_describe_target(table[name].target)}); "
                "pass clobber=True to replace it"
            )
        table[name] = Entry(name, target, extra, tuple(requires), "register()")
        self._loaded.pop((kind, name), None)
        self.generation += 1

    def unregister(self, kind: Kind, name: str) -> None:
        """Remove a name (a no-op when it is not registered)."""
        self._table(kind).pop(name, None)
        self._loaded.pop((kind, name), None)
        self.generation += 1

    def names(self, kind: Kind) -> list[str]:
        """Every registered name of ``kind``, sorted (entry points included)."""
        self._discover()
        return sorted(self._table(kind))

    def entry(self, kind: Kind, name: str) -> Entry:
        """The registration of ``name``.

        Raises:
            ConfigError: ``name`` is unknown; the message suggests close names.
        """
        table = self._table(kind)
        found = table.get(name)
        if found is None:
            self._discover()
            found = table.get(name)
        if found is None:
            raise ConfigError(
                f"unknown {_SINGULAR[kind]} {name!r}{did_you_mean(name, table)}; "
                f"known: {', '.join(sorted(table))}"
            )
        return found

    def resolve(self, kind: Kind, name: str) -> Any:
        """Import (once) and return the factory registered as ``name``.

        ``name`` may also be a ``"module:attr"`` string, imported directly.

        Raises:
            ConfigError: unknown name (with "did you mean ..."); a missing optional driver
                (with the ``pip install 'chatlayers[extra]'`` hint); an import failure.
        """
        cached = self._loaded.get((kind, name))
        if cached is not None:
            return cached
        what = f"{_SINGULAR[kind]} {name!r}"
        if ":" in name and name not in self._table(kind):
            factory = import_target(name, what=what)
        else:
            entry = self.entry(kind, name)
            check_requires(entry, what)
            if isinstance(entry.target, str):
                factory = self._import_entry(entry, what)
            else:
                factory = entry.target
        if not callable(factory):
            raise ConfigError(f"{what}: {_describe_target(factory)} is not callable")
        self._loaded[(kind, name)] = factory
        return factory

    def _import_entry(self, entry: Entry, what: str) -> Any:
        assert isinstance(entry.target, str)
        try:
            return import_target(entry.target, what=what)
        except ConfigError as exc:
            cause = exc.__cause__
            if isinstance(cause, ModuleNotFoundError) and entry.extra is not None:
                missing = (cause.name or "").partition(".")[0]
                if missing in entry.requires:
                    raise missing_driver(entry, what, missing) from cause
            raise

    def refresh(self) -> None:
        """Discover entry points again (after installing a package at run time)."""
        self._entry_points_loaded = not self._use_entry_points
        self._discover()

    def _table(self, kind: str) -> dict[str, Entry]:
        try:
            return self._entries[kind]  # type: ignore[index]
        except KeyError:
            raise ConfigError(f"unknown registry kind {kind!r}; expected one of {KINDS}") from None

    def _discover(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for kind, group in ENTRY_POINT_GROUPS.items():
            table = self._entries[kind]
            for ep in importlib.metadata.entry_points(group=group):
                dist = getattr(ep, "dist", None)
                origin = f"entry point of {dist.name if dist else 'an unknown distribution'}"
                existing = table.get(ep.name)
                if existing is not None:
                    if existing.target != ep.value or existing.origin != origin:
                        log.warning(
                            "ignoring %s %r from %s (%s): the name is taken by %s",
                            _SINGULAR[kind],
                            ep.name,
                            origin,
                            ep.value,
                            existing.origin,
                        )
                    continue
                table[ep.name] = Entry(ep.name, ep.value, None, (), origin)
                self.generation += 1


def check_requires(entry: Entry, what: str) -> None:
    """Raise the install hint when a module ``entry`` requires cannot be found (not imported)."""
    for module in entry.requires:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise missing_driver(entry, what, module)


def missing_driver(entry: Entry, what: str, module: str) -> ConfigError:
    """The error for a missing optional driver, naming the extra that installs it."""
    extra = entry.extra or module
    return ConfigError(
        f"{what} needs the {module!r} package, which is not installed: "
        f"pip install 'chatlayers[{extra}]'"
    )


def _describe_target(target: object) -> str:
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", "?")
    qualname = getattr(target, "__qualname__", type(target).__name__)
    return f"{module}:{qualname}"


registry: Final = Registry()
"""The process-wide registry ``open_storage`` uses by default."""
