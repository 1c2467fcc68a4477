"""The resolve pass: a ``StackSpec`` to a ``StackPlan``, ready to construct.

Resolving is where a configuration meets the world, and the only place it does:

- the environment: ``CHATLAYERS_URL`` / ``CHATLAYERS_CONFIG`` (:func:`configured_source`)
  and a ``[store]`` table's ``url_env`` (:func:`read_store_url`), which say where the
  configuration is, then every ``X_env`` option (``X`` read from the variable it names);
- files: ``*_file`` options are made absolute, relative to the config file's directory
  (else the working directory);
- the registry and its entry points: each name to its factory (:mod:`storage.config.registry`);
- each factory's declared options (:mod:`storage.config.options`): an unknown one is refused
  ("did you mean"), a required one demanded, every value converted by its declared type and
  checked by the ``Check`` of its annotation (:mod:`storage.checked`);
- where a value came from, for a factory declaring ``X_source`` next to ``X`` (the ``scrub``
  layer's ``secret_source``): ``"env:VARIABLE"`` for ``X_env``, ``"config"`` for a value
  written in the URL or the table; such an ``X_source`` is never given by hand;
- secrets: URL passwords, sensitive option values and values read from the environment;
- the checks a built-in layer's constructor makes that need nothing built (the
  summarizing layer's budgets taken together, the scrubbing layer's ``known_values_file``,
  the encrypting layer's master keys, the configurations a mirroring layer names:
  :mod:`storage.layers.checks`), for every layer whose options are otherwise good;
  what only the built stack can tell is left to construction
  (:mod:`storage.config.construct` lists it).

A :class:`_Resolution` collects every problem (those parsing left in the spec first) and
every secret in one place, and carries on past each problem, so the ``StackPlan`` lists them
all; :func:`storage.config.open_storage` raises them as one ``ConfigError``. Nothing is
constructed here. Value-level helpers (``Registry.resolve``, ``convert_option``) raise a
``ConfigError`` for a bad name or value; the resolution records it where it calls them.
Nested components (a layer's ``summarizer``) are resolved after their owner accepted them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from storage.config.options import Param, convert_option, declared_options
from storage.config.parse import Parser
from storage.config.problems import Problem, config_error, did_you_mean, labelled
from storage.config.registry import Registry
from storage.config.registry import registry as default_registry
from storage.config.spec import NESTED, SINGULAR, ComponentSpec, StackSpec
from storage.errors import ConfigError
from storage.layers.checks import Checked, check_of
from storage.redact import is_sensitive, secrets_of_options, secrets_of_url
from storage.stores.base import BaseStore

__all__ = [
    "ENV_CONFIG",
    "ENV_URL",
    "Plan",
    "StackPlan",
    "configured_source",
    "read_store_url",
    "resolve",
]

ENV_URL: Final = "CHATLAYERS_URL"
ENV_CONFIG: Final = "CHATLAYERS_CONFIG"
_SOURCE: Final = "_source"


@attrs.frozen
class Plan:
    """One component resolved: ``factory(*inner, *args, **kwargs)`` builds it, a nested
    :class:`Plan` in ``kwargs`` first."""

    label: str
    factory: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


@attrs.frozen
class StackPlan:
    """A whole stack resolved, or every problem that keeps it from being built.

    Attributes:
        store: the base store (``None`` when there are problems).
        layers: the layers, outermost first (empty when there are problems).
        source: where the configuration came from, redacted.
        secrets: every secret string of the configuration (redacted from every message).
        problems: every mistake found by parsing and resolving; none: ready to construct.
    """

    store: Plan | None
    layers: tuple[Plan, ...]
    source: str
    secrets: frozenset[str]
    problems: tuple[Problem, ...]


def configured_source() -> tuple[str | None, str | None]:
    """The URL chain (``CHATLAYERS_URL``) or config file (``CHATLAYERS_CONFIG``) the
    environment names, ``(url, path)``; both ``None`` when neither is set.

    Raises:
        ConfigError: both variables are set.
    """
    url = os.environ.get(ENV_URL) or None
    config = os.environ.get(ENV_CONFIG) or None
    if url and config:
        raise ConfigError(f"both {ENV_URL} and {ENV_CONFIG} are set; set only one")
    return url, config


def resolve(spec: StackSpec, registry: Registry | None = None) -> StackPlan:
    """Resolve every name of ``spec`` and convert and check every option (nothing is built).

    Args:
        spec: the parsed stack (its ``problems`` are kept, first).
        registry: the registry to resolve names in (default: the process-wide one).
    """
    return _Resolution(registry if registry is not None else default_registry).stack(spec)


def read_store_url(spec: StackSpec) -> StackSpec:
    """``spec`` with its store's URL read from the variable a ``[store]`` table's
    ``url_env`` names, and parsed as the table's ``url`` would have been (a problem is
    added to ``StackSpec.problems``); ``spec`` itself when there is no ``url_env``.

    :func:`storage.config.loading.to_spec` calls it, so the stack it returns names its
    store (the command line decides on a read-only SQLite store before building).
    """
    store = spec.store
    if store.url_env is None or not store.parsed:
        return spec
    try:
        url = _env(store.url_env, "store", "url")
    except ConfigError as exc:
        unread = ComponentSpec("stores", "", where=store.where, parsed=False)
        return attrs.evolve(
            spec, store=unread, problems=[*spec.problems, Problem(store.where, str(exc), exc)]
        )
    parser = Parser(store.base_dir)
    options = dict(store.options)
    resolved = parser.store_table_url(url, options.pop("type", None), options)
    return attrs.evolve(spec, store=resolved, problems=[*spec.problems, *parser.problems])


def _env(variable: Any, label: str, option: str) -> str:
    """The value of the environment variable an ``OPTION_env`` option names.

    Raises:
        ConfigError: ``variable`` is not a non-empty string, or the variable is not set.
    """
    if not isinstance(variable, str) or not variable:
        raise ConfigError(f"{label}: {option}_env must name an environment variable")
    value = os.environ.get(variable)
    if value is None:
        raise ConfigError(f"{label}: {option}_env names {variable!r}, which is not set")
    return value


@attrs.define
class _Part:
    """A component being resolved. ``key`` orders its problems as the configuration is
    written: a nested component's key is its owner's plus the position of the option
    (``option``) it is given in."""

    spec: ComponentSpec
    key: tuple[int, ...]
    owner: _Part | None = None
    option: str = ""
    factory: Any = None
    declared: Mapping[str, Param] = attrs.field(factory=dict)
    open_kwargs: bool = False
    kwargs: dict[str, Any] = attrs.field(factory=dict)
    sources: dict[str, str] = attrs.field(factory=dict)
    from_url: bool = attrs.field(init=False)  # a store given by URL: from_url(url, ...)

    @from_url.default
    def _from_url(self) -> bool:
        return self.spec.kind == "stores" and self.spec.url is not None


class _Resolution:
    """One resolution: every problem and every secret of the stack, collected here."""

    def __init__(self, registry: Registry, within: frozenset[str] = frozenset()) -> None:
        self.registry = registry
        self.secrets: set[str] = set()
        self._problems: list[tuple[tuple[int, ...], Problem]] = []
        self._failed: set[tuple[int, ...]] = set()  # the keys of parts with a problem
        self._within = within  # the configurations being resolved around this one
        self._url_source = False

    def _problem(self, key: tuple[int, ...], where: str, error: str | ConfigError) -> None:
        """Record a problem of the part whose key is ``key[:-1]``."""
        cause = error if isinstance(error, ConfigError) else None
        self._problems.append((key, Problem(where, str(error), cause)))
        self._failed.add(key[:-1])

    def stack(self, spec: StackSpec) -> StackPlan:
        spec = read_store_url(spec)
        self._url_source = spec.source.startswith("URL ")  # as StackSpec.source says
        store = spec.store
        parts = [_Part(store, (0,))] if store.parsed else []
        parts += [_Part(layer, (n,)) for n, layer in enumerate(spec.layers, 1) if layer.parsed]
        for part in parts:
            self.secrets |= _secrets_of(part.spec)
        done: list[_Part] = []
        while parts:  # the stack's components, then the nested ones they accepted
            self._factories(parts)
            parts = [part for part in parts if part.factory is not None]
            done += parts
            parts = self._options(parts)
        for part in done:
            if part.key not in self._failed:
                self._check(part)
        problems = list(spec.problems)
        problems += [problem for _, problem in sorted(self._problems, key=lambda p: p[0])]
        if not store.parsed and not problems:  # a hand-made spec with an unread store
            problems.append(Problem(store.where, "the store could not be read"))
        if problems:
            return StackPlan(None, (), spec.source, frozenset(self.secrets), tuple(problems))
        top = _plans(done)
        return StackPlan(top[0], tuple(top[1:]), spec.source, frozenset(self.secrets), ())

    def _factories(self, parts: list[_Part]) -> None:
        """Each part's factory from the registry, then the options it declares."""
        for part in parts:
            spec = part.spec
            try:
                part.factory = self.registry.resolve(spec.kind, spec.name)
            except ConfigError as exc:
                self._problem((*part.key, -1), spec.where or _label(spec), exc)
        for part in parts:
            if part.factory is not None and part.spec.type_given is not None:
                self._check_type(part)
        for part in parts:
            if part.factory is None:
                continue
            skip = part.spec.kind == "layers" or part.from_url
            try:
                part.declared, part.open_kwargs = declared_options(part.factory, skip_first=skip)
            except ConfigError as exc:
                self._problem((*part.key, -1), part.spec.where or _label(part.spec), exc)
                part.factory = None

    def _check_type(self, part: _Part) -> None:
        """A ``[store]`` table's ``type`` beside its ``url`` must name the scheme's store
        (two names of one store, such as ``postgres`` and ``postgresql``, agree)."""
        spec = part.spec
        given = spec.type_given
        if given == spec.name:
            return
        try:
            same = self.registry.resolve(spec.kind, given) is part.factory
        except ConfigError:
            same = False
        if not same:
            self._problem(
                (*part.key, -1),
                spec.where,
                f"{spec.where}: type {given!r} does not match the URL scheme {spec.name!r}",
            )

    def _check(self, part: _Part) -> None:
        """Run the check of ``part``'s constructor that needs nothing built
        (:mod:`storage.layers.checks`); what it refuses is a problem of the part."""
        check = check_of(part.factory)
        if check is None:
            return
        spec = part.spec
        try:
            check(Checked(part.factory, part.kwargs, self._configuration))
        except (ValueError, TypeError, ImportError) as exc:  # ConfigError is a ValueError
            label = _label(spec)
            text = labelled(label, exc)
            if isinstance(exc, ImportError):
                text = f"{label}: a module it needs is missing: {exc}"
            key = (*part.key, len(spec.options) + 1)
            self._problems.append((key, Problem(spec.where or label, text, exc)))

    def _configuration(self, source: str) -> None:
        """Raise the problems of the configuration ``source`` names (a component's option:
        the mirroring layer's ``secondary``), resolved, not built; its secrets are ours."""
        if source in self._within:
            return  # being resolved already (a configuration naming itself)
        plan = self._resolve_source(source)
        self.secrets |= plan.secrets
        if plan.problems:
            error = config_error(plan.problems, plan.source, plan.secrets)
            raise error from error.__cause__

    def _resolve_source(self, source: str) -> StackPlan:
        """The plan of the configuration ``source`` names, in a resolution of its own.

        Raises:
            ConfigError: ``source`` is no configuration at all.
        """
        from storage.config.loading import to_spec  # loading imports this module

        return _Resolution(self.registry, self._within | {source}).stack(to_spec(source))

    def _options(self, parts: list[_Part]) -> list[_Part]:
        """Convert and check every option of ``parts``; return the nested components they
        accepted (to resolve next)."""
        todo: list[tuple[_Part, int, str, Any, Any]] = []
        nested: list[_Part] = []
        for part in parts:
            self._match(part, todo, nested)
        for part, index, name, value, annotation in todo:
            label = _label(part.spec)
            try:
                part.kwargs[name] = convert_option(value, annotation, label, name)
            except ConfigError as exc:
                self._problem((*part.key, index), part.spec.where or label, exc)
        for part in parts:  # where each X that has an X_source came from
            for name in part.declared:
                target = name[: -len(_SOURCE)]
                if _is_source_of(name, part.declared) and target in part.kwargs:
                    part.kwargs[name] = part.sources.get(target, "config")
        return nested

    def _match(
        self,
        part: _Part,
        todo: list[tuple[_Part, int, str, Any, Any]],
        nested: list[_Part],
    ) -> None:
        """Sort ``part``'s options: each declared one into ``todo`` (to convert), each
        nested component into ``nested``; an unknown one, an ``X_source`` given by hand or a
        required one missing is a problem. ``X_env`` options are read first."""
        spec, declared, key = part.spec, part.declared, part.key
        label, place = _label(spec), spec.where or _label(spec)
        options = self._read_env(part)
        settable = [n for n in declared if not _is_source_of(n, declared)]
        for name, (index, value) in options.items():
            param = declared.get(name)
            if param is None:
                if (
                    part.from_url
                    and name in spec.url_options
                    and getattr(part.factory, "url_driver_options", True)
                    and not did_you_mean(name, declared)
                ):
                    continue  # a driver parameter (sslmode=...): the store reads it from the URL
                if part.open_kwargs:
                    part.kwargs[name] = value
                    continue
                allowed = ", ".join(sorted(settable)) or "none"
                self._problem(
                    (*key, index),
                    place,
                    f"{label} has no option {name!r}{did_you_mean(name, settable)}; "
                    f"allowed: {allowed}",
                )
            elif _is_source_of(name, declared):
                self._problem(
                    (*key, index),
                    place,
                    f"{label}: option {name!r} is set by the configuration (where "
                    f"{name[: -len(_SOURCE)]!r} comes from); it cannot be given",
                )
            elif name in NESTED and isinstance(value, ComponentSpec | str | Mapping):
                child = self._nested(part, index, name, value)
                if child is not None:
                    nested.append(child)
            else:
                if name.endswith("_file") and isinstance(value, str) and value:
                    # Absolute, so every message names the file that is read.
                    value = os.path.abspath((spec.base_dir or Path()) / Path(value).expanduser())
                todo.append((part, index, name, value, param.annotation))
        given = set(options) | set(part.sources)
        for name, param in declared.items():
            if param.required and name not in given:
                # In a URL a nested component's options are prefixed by the option it is
                # given in (summarizer.model=...); the owner may have one of the same name.
                hint = (
                    f" (in a URL: {part.option}.{name}=...)"
                    if part.owner is not None and self._url_source
                    else ""
                )
                self._problem(
                    (*key, len(spec.options)), place, f"{label} needs option {name!r}{hint}"
                )

    def _nested(
        self, owner: _Part, index: int, name: str, value: ComponentSpec | str | Mapping[str, Any]
    ) -> _Part | None:
        """The part of the nested component option ``name`` of ``owner`` gives (a name or a
        mapping in a spec made in code is parsed first); ``None``: it cannot be read."""
        key = (*owner.key, index)
        if not isinstance(value, ComponentSpec):
            parser = Parser(owner.spec.base_dir)
            place = f"{owner.spec.where or _label(owner.spec)}, {name}"
            value = parser.nested(NESTED[name], value, place, f"{_label(owner.spec)}: {name}")
            self._problems += [(key, problem) for problem in parser.problems]
        if not value.parsed:
            return None  # its problem is recorded
        return _Part(value, key, owner=owner, option=name)

    def _read_env(self, part: _Part) -> dict[str, tuple[int, Any]]:
        """``part``'s options (name to its position and value) with each ``X_env``
        replaced by ``X`` read from the environment (``part.sources`` maps each such ``X``
        to ``"env:VARIABLE"``). A problem is recorded, and ``X`` left out, when the
        variable is unset or both ``X`` and ``X_env`` are given."""
        spec, declared = part.spec, part.declared
        label, place = _label(spec), spec.where or _label(spec)
        options = {name: (index, value) for index, (name, value) in enumerate(spec.options.items())}
        for env_key in [k for k in options if k.endswith("_env")]:
            target = env_key[: -len("_env")]
            if not (target in declared or (part.open_kwargs and target)):
                continue  # an option of its own (the encrypting layer's key_env)
            index, variable = options.pop(env_key)
            if target in options:
                self._problem(
                    (*part.key, index), place, f"{label}: give {target!r} or {env_key!r}, not both"
                )
                continue
            try:
                value = _env(variable, label, target)
            except ConfigError as exc:
                self._problem((*part.key, index), place, exc)
                part.sources[target] = ""
                continue
            options[target] = (index, value)
            part.sources[target] = f"env:{variable}"
            if is_sensitive(target):
                self.secrets.add(value)
        return options


def _label(spec: ComponentSpec) -> str:
    """``layer 'scrub'``: how errors name a component."""
    return f"{SINGULAR[spec.kind]} {spec.name!r}"


def _is_source_of(name: str, declared: Mapping[str, Any]) -> bool:
    """``name`` is ``X_source`` for a declared ``X``: where X came from, set by config."""
    return name.endswith(_SOURCE) and name[: -len(_SOURCE)] in declared


def _secrets_of(spec: ComponentSpec) -> set[str]:
    """Every secret string ``spec`` holds: its URL's, its sensitive option values, and
    those of the nested components in its options."""
    found = secrets_of_url(spec.url) if spec.url is not None else set()
    plain = {k: v for k, v in spec.options.items() if not isinstance(v, ComponentSpec)}
    found |= secrets_of_options(plain)
    for value in spec.options.values():
        if isinstance(value, ComponentSpec):
            found |= _secrets_of(value)
    return found


def _plans(parts: list[_Part]) -> list[Plan]:
    """The plans of the stack's components, in order (a nested component's plan is in its
    owner's ``kwargs``)."""
    top: list[Plan] = []
    for part in reversed(parts):  # nested components come after their owners
        args: tuple[Any, ...] = ()
        factory = part.factory
        if part.from_url:
            factory, args = _url_factory(factory), (part.spec.url,)
        plan = Plan(_label(part.spec), factory, args, part.kwargs)
        if part.owner is not None:
            part.owner.kwargs[part.option] = plan
        else:
            top.append(plan)
    return top[::-1]


def _url_factory(factory: Any) -> Callable[..., Any]:
    """``factory.from_url`` (every built-in store reads its own URL, ``BaseStore.from_url``);
    a third-party factory without one is called with the URL first, as the registry
    documents."""
    own = getattr(factory, "from_url", None)
    if callable(own) and getattr(own, "__func__", None) is not _BASE_FROM_URL:
        return own  # type: ignore[no-any-return]
    return factory  # type: ignore[no-any-return]


_BASE_FROM_URL: Final = BaseStore.from_url.__func__  # type: ignore[attr-defined]
