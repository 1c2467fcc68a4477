"""Option values converted by the declared type of the factory parameter they are for.

:func:`declared_options` reads a factory's keyword parameters and their annotations;
:func:`convert` turns a value into the declared type. Strings (from URLs and environment
variables) are parsed: ``int``, ``float``, ``bool`` (``true/false/1/0/yes/no/on/off``),
``Literal`` choices, lists (comma-separated or a JSON list), mappings (a JSON object) and
callables (``module:attr``). Native values (TOML, dicts) are checked, never reinterpreted: a
number given for a string option is refused, never guessed. An ``Annotated[T, Check(f)]``
option (:mod:`storage.checked`) is converted to ``T`` and then checked by ``f``, so a bad
value (``retention = "30x"``) is a ``ConfigError`` found while planning, with the others.
:func:`convert_option` is what resolving calls for each option of a component.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Union

import attrs

from storage.checked import checks_of
from storage.config.registry import import_target
from storage.errors import ConfigError

__all__ = ["Param", "convert", "convert_option", "declared_options"]

_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})


@attrs.frozen
class Param:
    """One keyword option a factory declares: its name, type annotation and whether it is
    required (has no default)."""

    name: str
    annotation: Any
    required: bool


def declared_options(factory: Any, *, skip_first: bool) -> tuple[dict[str, Param], bool]:
    """The keyword options ``factory`` declares (name → :class:`Param`) and whether it takes
    ``**kwargs`` that nothing describes (then unknown options pass through unconverted).

    Args:
        factory: a class or a function.
        skip_first: leave out the first positional parameter (a layer's ``inner``, a store's
            location).

    A factory that forwards its ``**kwargs`` names the callable they go to in its
    ``chatlayers_forwards_to`` attribute (the callable or ``"module:attr"``); that callable's
    options are then declared too, all optional.
    """
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return {}, True
    hints = _type_hints(factory)
    params: dict[str, Param] = {}
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
        params[p.name] = Param(p.name, hints.get(p.name, Any), p.default is p.empty)
    forwards = getattr(factory, "chatlayers_forwards_to", None)
    if open_kwargs and forwards is not None:
        target = import_target(forwards, what="options") if isinstance(forwards, str) else forwards
        more, open_kwargs = declared_options(target, skip_first=False)
        for name, param in more.items():
            if name not in params:
                params[name] = attrs.evolve(param, required=False)
    return params, open_kwargs


def _type_hints(obj: Any) -> dict[str, Any]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    # The names of an inherited __init__ are those of the module that defines it.
    globalns = getattr(inspect.unwrap(target), "__globals__", None)
    if globalns is None:
        module = sys.modules.get(getattr(obj, "__module__", ""), None)
        globalns = vars(module) if module is not None else None
    try:
        return typing.get_type_hints(target, globalns=globalns, include_extras=True)
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


def convert_option(value: Any, annotation: Any, label: str, name: str) -> Any:
    """Convert the value of option ``name`` of the component ``label`` (``"layer 'scrub'"``)
    to its declared type, and run its ``Check`` annotations.

    A failed check reads as the constructor's own error would: ``layer 'x': trigger_at must
    be >= 1, got 0`` when the check's message starts with the option's name, else
    ``layer 'x': option 'trigger_at': MESSAGE``.

    Raises:
        ConfigError: the value does not fit the type or fails a check (see :func:`convert`).
    """
    where = f"{label}: option {name!r}"
    try:
        return convert(value, annotation, where)
    except ConfigError as exc:
        check = exc.__cause__
        if (
            isinstance(check, ValueError | TypeError)
            and str(exc) == f"{where}: {check}"
            and str(check).startswith(f"{name} ")
        ):
            raise ConfigError(f"{label}: {check}") from check
        raise


def convert(value: Any, annotation: Any, where: str) -> Any:
    """Convert an option value to its declared type.

    Strings (from URLs and environment variables) are parsed; native values (TOML, dicts) are
    checked, never reinterpreted (a TOML integer for a string option is refused).

    Args:
        value: the raw value.
        annotation: the declared type (``Any`` or no annotation: the value is kept as is).
        where: how errors name the option (``"layer 'scrub': option 'mode'"``).

    Raises:
        ConfigError: the value does not fit the type (for ``Literal`` choices the allowed
            values are listed), or fails a ``Check`` of its annotation (the check's error
            is the cause).
    """
    if annotation is Any or annotation is inspect.Parameter.empty:
        return value
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _convert_annotated(value, annotation, where)
    args = typing.get_args(annotation)
    if origin is Union or origin is types.UnionType:
        return _convert_union(value, args, where)
    if origin is typing.Literal:
        return _convert_literal(value, args, where)
    scalar = _SCALARS.get(annotation) if isinstance(annotation, type) else None
    if scalar is not None:
        return scalar(value, where)
    if annotation is Path or origin is os.PathLike or annotation is os.PathLike:
        return _convert_path(value, annotation, where)
    if origin in (list, tuple, set, frozenset) or _is_abc(
        origin, ("Sequence", "Iterable", "Collection", "Set", "MutableSequence")
    ):
        return _convert_collection(value, origin, args, where)
    if origin in (dict,) or _is_abc(origin, ("Mapping", "MutableMapping")):
        return _convert_mapping(value, args, where)
    if _is_abc(origin or annotation, ("Callable",)):
        return _convert_callable(value, where)
    if isinstance(annotation, type):
        return _convert_instance(value, annotation, where)
    return value


def _convert_annotated(value: Any, annotation: Any, where: str) -> Any:
    converted = convert(value, annotation.__origin__, where)
    for check in checks_of(annotation):
        try:
            check(converted)
        except (ValueError, TypeError) as exc:  # InvalidArgumentError is a ValueError
            raise ConfigError(f"{where}: {exc}") from exc
    return converted


def _convert_path(value: Any, annotation: Any, where: str) -> Any:
    if isinstance(value, str | os.PathLike):
        return Path(value) if annotation is Path else value
    raise ConfigError(f"{where} must be a path string, got {type(value).__name__}")


def _convert_callable(value: Any, where: str) -> Any:
    if callable(value):
        return value
    if isinstance(value, str) and ":" in value:
        return import_target(value, what=where)
    raise ConfigError(f"{where} must be a 'module:function' reference, got {value!r}")


def _convert_instance(value: Any, annotation: type, where: str) -> Any:
    try:
        if isinstance(value, annotation):
            return value
    except TypeError:  # a non-runtime Protocol
        return value
    raise ConfigError(f"{where} must be {annotation.__name__}, got {type(value).__name__}")


def _convert_union(value: Any, args: tuple[Any, ...], where: str) -> Any:
    if value is None and type(None) in args:
        return None
    errors: list[ConfigError] = []
    for member in args:
        if member is type(None):
            continue
        try:
            return convert(value, member, where)
        except ConfigError as exc:
            errors.append(exc)
    choices = [a for a in args if a is not type(None)]
    if len(errors) == 1:
        raise errors[0]
    raise ConfigError(
        f"{where} must be {' or '.join(_type_name(c) for c in choices)}, got {value!r}"
    )


def _convert_literal(value: Any, args: tuple[Any, ...], where: str) -> Any:
    for choice in args:
        candidate = value
        if isinstance(value, str) and not isinstance(choice, str):
            try:
                candidate = convert(value, type(choice), where)
            except ConfigError:
                continue
        if candidate == choice and type(candidate) is type(choice):
            return candidate
    raise ConfigError(f"{where} must be one of {', '.join(repr(c) for c in args)}; got {value!r}")


def _to_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(f"{where} must be a boolean (true or false), got {value!r}")


def _to_int(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"{where} must be an integer, got {value!r}")


def _to_float(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"{where} must be a number, got {value!r}")


def _to_str(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    raise ConfigError(f"{where} must be a string, got {type(value).__name__} {value!r} (quote it)")


def _to_bytes(value: Any, where: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise ConfigError(f"{where} must be a string, got {type(value).__name__}")


_SCALARS: Final[Mapping[type, Callable[[Any, str], Any]]] = {
    bool: _to_bool,
    int: _to_int,
    float: _to_float,
    str: _to_str,
    bytes: _to_bytes,
}


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


def _convert_mapping(value: Any, args: tuple[Any, ...], where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigError(f"{where} must be a JSON object, got {value!r}") from None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table/mapping, got {type(value).__name__}")
    value_type = args[1] if len(args) == 2 else Any
    return {str(k): convert(v, value_type, f"{where}[{k!r}]") for k, v in value.items()}


def _is_abc(origin: Any, names: tuple[str, ...]) -> bool:
    return (
        getattr(origin, "__module__", "") in ("collections.abc", "typing")
        and getattr(origin, "__name__", "") in names
    )


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = annotation.__origin__
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("collections.abc.", "")
