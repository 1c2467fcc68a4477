"""Build a ``StackSpec`` into a ``Stack``: resolve, convert, then construct inner first.

Every name is resolved in the registry and every option converted (:mod:`storage.config.options`)
before anything is constructed, so a bad option constructs nothing. Calling conventions are
those of :mod:`storage.config.registry`: a store from a URL gets its path (``sqlite``, ``jsonl``),
nothing (``memory``), or the URL itself (through ``from_url`` when it has one); a layer gets
the component it wraps first. ``X_env`` options are read from the environment; ``*_file``
options are relative to the config file's directory. Every error is a ``ChatStorageError``
whose text holds no secret (:mod:`storage.redact`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from storage.config.chain import (
    NO_LOCATION_SCHEMES,
    PATH_SCHEMES,
    has_location,
    query_keys,
    store_path,
    strip_query,
)
from storage.config.options import convert, declared_options, from_env
from storage.config.registry import Registry, did_you_mean
from storage.config.registry import registry as default_registry
from storage.config.spec import NESTED, ComponentSpec, StackSpec, component_from_table
from storage.config.stack import Stack, describe_lines
from storage.errors import ChatStorageError, ConfigError
from storage.protocol import PROTOCOL_METHODS, ChatStorage
from storage.redact import is_sensitive, scrubbed_error

__all__ = ["build"]

log = logging.getLogger(__name__)


def build(spec: StackSpec, *, registry: Registry | None = None) -> Stack:
    """Build the stack described by ``spec``: resolve every name and convert every option
    first, then construct the store and wrap the layers around it, innermost first.

    Args:
        spec: the parsed stack.
        registry: the registry to resolve names in (default: the process-wide one).

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
        error = scrubbed_error(ConfigError, f"{spec.source}: {exc}", exc, secrets)
        raise error from error.__cause__
    top: Any = _construct(store_plan, secrets)
    _check_storage(top, store_plan)
    for plan in reversed(layer_plans):
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


def _plan(spec: ComponentSpec, reg: Registry, secrets: set[str]) -> _Plan:
    """Resolve ``spec`` and convert its options (``secrets`` gains those read from the
    environment)."""
    factory = reg.resolve(spec.kind, spec.name)
    args: list[Any] = []
    options = dict(spec.options)
    passthrough_query = False
    use_from_url = False
    if spec.kind == "stores" and spec.url is not None:
        scheme = spec.name
        use_from_url = callable(getattr(factory, "from_url", None))
        if scheme in PATH_SCHEMES:
            args.append(store_path(spec.url, scheme))
            use_from_url = False
        elif scheme in NO_LOCATION_SCHEMES or not (use_from_url or _takes_positional(factory)):
            if has_location(spec.url):
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
            options[target] = from_env(options.pop(key), spec.label, target)
            if is_sensitive(target):
                secrets.add(options[target])
    kwargs: dict[str, Any] = {}
    url_query_keys = set(query_keys(spec.url)) if spec.url else set()
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
                else component_from_table(
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
        args.append(strip_query(spec.url, (k for k in options if k in declared)))
    return _Plan(spec, factory.from_url if use_from_url else factory, args, kwargs)


def _takes_positional(factory: Any) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _construct(plan: _Plan, secrets: set[str], *inner: Any) -> Any:
    kwargs = {
        k: _construct(v, secrets) if isinstance(v, _Plan) else v for k, v in plan.kwargs.items()
    }
    try:
        return plan.factory(*inner, *plan.args, **kwargs)
    except ConfigError as exc:
        error = scrubbed_error(ConfigError, f"{plan.spec.label}: {exc}", exc, secrets)
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
