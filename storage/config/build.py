"""Build a ``StackSpec`` into a ``Stack``: resolve, convert, then construct inner first.

Every name is resolved in the registry and every option converted (:mod:`storage.config.options`)
before anything is constructed, so a bad option constructs nothing; planning goes on past a
problem, so one ``ConfigError`` lists every mistake (:mod:`storage.config.problems`).
Calling conventions are those of :mod:`storage.config.registry`: a store from a URL is
``factory.from_url(url, **options)`` (the store reads its own URL); a layer gets the
component it wraps first. Where an option came from is passed to a factory declaring
``X_source`` (``"env:VARIABLE"`` or ``"config"``; see ``_plan``).
``X_env`` options are read from the environment; ``*_file`` options are relative to the
config file's directory. Every error is a ``ChatStorageError``
whose text holds no secret (:mod:`storage.redact`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from storage.config.options import convert, declared_options, from_env
from storage.config.problems import Problems
from storage.config.registry import Registry, did_you_mean
from storage.config.registry import registry as default_registry
from storage.config.spec import NESTED, ComponentSpec, StackSpec, component_from_table
from storage.config.stack import Stack, describe_lines
from storage.errors import ChatStorageError, ConfigError, InvalidArgumentError
from storage.protocol import PROTOCOL_METHODS, ChatStorage
from storage.redact import is_sensitive, scrubbed_error
from storage.stores.base import BaseStore

__all__ = ["build"]

log = logging.getLogger(__name__)


def build(spec: StackSpec, *, registry: Registry | None = None) -> Stack:
    """Build the stack described by ``spec``: resolve every name and convert every option
    first, then construct the store and wrap the layers around it, innermost first.

    Every component is planned even after a problem is found, so one ``ConfigError`` names
    every mistake (with those parsing left in ``spec.problems``), each with where it is.

    Args:
        spec: the parsed stack.
        registry: the registry to resolve names in (default: the process-wide one).

    Raises:
        ConfigError: unknown names, missing drivers, bad options (all of them; nothing is
            constructed).
        StorageUnavailableError: the store cannot open its file (network stores connect
            lazily, on first use).
    """
    reg = registry if registry is not None else default_registry
    secrets = spec.secrets()
    problems = Problems(list(spec.problems))
    store_plan = _plan(spec.store, reg, secrets, problems) if spec.store.parsed else None
    layer_plans = [_plan(layer, reg, secrets, problems) for layer in spec.layers if layer.parsed]
    if not spec.store.parsed and not problems:  # its problem was dropped from spec.problems
        problems.add(spec.store.place, "the store could not be read")
    problems.raise_if_any(spec.source, secrets)
    assert store_plan is not None  # no problem: every component was planned
    top: Any = _construct(store_plan, secrets)
    _check_storage(top, store_plan)
    for plan in reversed(layer_plans):
        assert plan is not None
        top = _construct(plan, secrets, top)
        _check_storage(top, plan)
    stack = Stack(top, source=spec.source, secrets=secrets)
    log.debug("built stack from %s: %s", spec.source, " | ".join(describe_lines(stack)))
    return stack


@attrs.define
class _Plan:
    """A component resolved and its options converted: ready to construct."""

    spec: ComponentSpec
    factory: Callable[..., Any]
    args: list[Any]
    kwargs: dict[str, Any]


_SOURCE: Final = "_source"


def _plan(
    spec: ComponentSpec, reg: Registry, secrets: set[str], problems: Problems
) -> _Plan | None:
    """Resolve ``spec`` and convert its options (``secrets`` gains those read from the
    environment); each mistake is added to ``problems`` and planning goes on with the next
    option, so all are found. ``None`` when ``spec`` has a problem.

    A store given by URL is built by ``factory.from_url(url, **options)``: ``options`` are
    the constructor's declared keyword options (from the URL query or the config table),
    converted by their declared types; query parameters it does not declare stay in the URL
    for the store to hand to its driver or refuse. A layer is ``factory(inner, **options)``;
    anything else ``factory(**options)``.

    Where an option's value came from is handed to a factory that declares ``X_source``
    next to ``X`` (the ``scrub`` layer's ``secret_source``): ``"env:VARIABLE"`` for
    ``X_env``, ``"config"`` for a value written in the URL or the table. Such an
    ``X_source`` is set by the configuration only, never given.
    """
    place = spec.place
    found = len(problems)
    try:
        factory = reg.resolve(spec.kind, spec.name)
        from_url = spec.kind == "stores" and spec.url is not None
        declared, open_kwargs = declared_options(
            factory, skip_first=spec.kind == "layers" or from_url
        )
    except ConfigError as exc:
        problems.add(place, exc)
        return None
    options = dict(spec.options)
    sources = _read_env_options(spec, options, declared, open_kwargs, secrets, problems)
    given = set(options) | set(sources)
    kwargs: dict[str, Any] = {}
    for name, value in options.items():
        param = declared.get(name)
        if param is None:
            if from_url and name in spec.url_options and not did_you_mean(name, declared):
                continue  # a driver parameter (sslmode=...): the store reads it from the URL
            if not open_kwargs:
                settable = [n for n in declared if not _is_source_of(n, declared)]
                allowed = ", ".join(sorted(settable)) or "none"
                problems.add(
                    place,
                    f"{spec.label} has no option {name!r}{did_you_mean(name, settable)}; "
                    f"allowed: {allowed}",
                )
                continue
            kwargs[name] = value
            continue
        if _is_source_of(name, declared):
            problems.add(
                place,
                f"{spec.label}: option {name!r} is set by the configuration (where "
                f"{name[: -len(_SOURCE)]!r} comes from); it cannot be given",
            )
            continue
        if name in NESTED and isinstance(value, ComponentSpec | str | Mapping):
            nested = _nested(spec, name, value, problems)
            if nested is None or not nested.parsed:
                continue  # its problem is recorded
            planned = _plan(nested, reg, secrets, problems)
            if planned is not None:
                kwargs[name] = planned
            continue
        if name.endswith("_file") and isinstance(value, str) and spec.base_dir is not None:
            value = str(spec.base_dir / Path(value).expanduser())
        try:
            kwargs[name] = convert(value, param.annotation, f"{spec.label}: option {name!r}")
        except ConfigError as exc:
            problems.add(place, exc)
    for name, param in declared.items():
        if param.required and name not in given:
            problems.add(place, f"{spec.label} needs option {name!r}")
    for name in declared:
        target = name[: -len(_SOURCE)]
        if _is_source_of(name, declared) and target in kwargs:
            kwargs[name] = sources.get(target, "config")
    if len(problems) > found:
        return None
    if from_url:
        assert spec.url is not None
        return _Plan(spec, _url_factory(factory), [spec.url], kwargs)
    return _Plan(spec, factory, [], kwargs)


def _is_source_of(name: str, declared: Mapping[str, Any]) -> bool:
    """``name`` is ``X_source`` for a declared ``X``: where X came from, set by config."""
    return name.endswith(_SOURCE) and name[: -len(_SOURCE)] in declared


def _nested(
    spec: ComponentSpec,
    name: str,
    value: ComponentSpec | str | Mapping[str, Any],
    problems: Problems,
) -> ComponentSpec | None:
    """The nested component option ``name`` gives (``None``: its problem is recorded)."""
    if isinstance(value, ComponentSpec):
        return value
    place = f"{spec.place}, {name}"
    try:
        nested = component_from_table(NESTED[name], value, f"{spec.label}: {name}", spec.base_dir)
    except ConfigError as exc:
        problems.add(place, exc)
        return None
    nested.where = f"{place} {nested.name!r}"
    return nested


def _read_env_options(
    spec: ComponentSpec,
    options: dict[str, Any],
    declared: Mapping[str, Any],
    open_kwargs: bool,
    secrets: set[str],
    problems: Problems,
) -> dict[str, str]:
    """Replace each ``X_env`` option by ``X`` read from the environment (in place); the
    result maps each such ``X`` to ``"env:VARIABLE"``. A problem is recorded, and ``X`` left
    out, when the variable is unset or both ``X`` and ``X_env`` are given."""
    sources: dict[str, str] = {}
    for key in [k for k in options if k.endswith("_env")]:
        target = key[: -len("_env")]
        if target in declared or (open_kwargs and target):
            variable = options.pop(key)
            if target in options:
                problems.add(spec.place, f"{spec.label}: give {target!r} or {key!r}, not both")
                continue
            try:
                options[target] = from_env(variable, spec.label, target)
            except ConfigError as exc:
                problems.add(spec.place, exc)
                sources[target] = ""
                continue
            sources[target] = f"env:{variable}"
            if is_sensitive(target):
                secrets.add(options[target])
    return sources


def _url_factory(factory: Any) -> Callable[..., Any]:
    """``factory.from_url`` (every built-in store reads its own URL, ``BaseStore.from_url``);
    a third-party factory without one is called with the URL first, as the registry
    documents."""
    own = getattr(factory, "from_url", None)
    if callable(own) and getattr(own, "__func__", None) is not _BASE_FROM_URL:
        return own  # type: ignore[no-any-return]
    return factory  # type: ignore[no-any-return]


_BASE_FROM_URL: Final = BaseStore.from_url.__func__  # type: ignore[attr-defined]


def _construct(plan: _Plan, secrets: set[str], *inner: Any) -> Any:
    kwargs = {
        k: _construct(v, secrets) if isinstance(v, _Plan) else v for k, v in plan.kwargs.items()
    }
    try:
        return plan.factory(*inner, *plan.args, **kwargs)
    except (ConfigError, InvalidArgumentError) as exc:
        # A value the constructor refused (a check not declared in its annotation, see
        # storage.checked) is a mistake of the configuration too.
        text = str(exc) if str(exc).startswith(plan.spec.label) else f"{plan.spec.label}: {exc}"
        error = scrubbed_error(ConfigError, text, exc, secrets)
    except ChatStorageError as exc:
        error = scrubbed_error(type(exc), str(exc), exc, secrets)
    except ImportError as exc:
        error = scrubbed_error(
            ConfigError, f"{plan.spec.label}: a module it needs is missing: {exc}", exc, secrets
        )
    except (ValueError, TypeError) as exc:
        error = scrubbed_error(ConfigError, f"{plan.spec.label}: {exc}", exc, secrets)
    raise error from error.__cause__


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
