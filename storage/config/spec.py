"""The parsed, unbuilt form of a stack: ``StackSpec`` (a store and layers) of ``ComponentSpec``.

URL chains (:mod:`storage.config.chain`) and the dict / TOML form (:mod:`storage.config`) both parse
to this form; :mod:`storage.config.build` resolves its names and builds it. Option values are still
raw here (strings from a URL, native values from TOML); a spec's repr never shows a secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from storage.config.problems import Problem, Problems
from storage.config.registry import Kind
from storage.errors import ConfigError
from storage.redact import (
    redact_options,
    redact_text,
    redact_url,
    secrets_of_options,
    secrets_of_url,
)

__all__ = ["NESTED", "ComponentSpec", "StackSpec", "component_from_table", "nest_tables"]

# Options that are themselves components, built from the named registry kind.
NESTED: Final[Mapping[str, Kind]] = {"summarizer": "summarizers"}
_SINGULAR: Final[Mapping[Kind, str]] = {
    "stores": "store",
    "layers": "layer",
    "summarizers": "summarizer",
}


@attrs.define(repr=False)
class ComponentSpec:
    """One store, layer or summarizer of a stack, before it is built.

    Attributes:
        kind: ``"stores"``, ``"layers"`` or ``"summarizers"``.
        name: the registry name (or ``"module:attr"``).
        options: raw options: strings from a URL, native values from TOML or a dict; a nested
            component (``summarizer``) is a ``ComponentSpec``.
        url: the store URL (stores only; ``None`` when built from ``type`` and options). Holds
            the password: never print it, use :func:`storage.redact.redact_url`.
        base_dir: directory that ``*_file`` options are relative to (the config file's).
        url_options: the names of ``options`` that came from the URL's query (those the
            store does not declare stay in the URL for the store; others are refused).
        where: where it is written, as errors listing several problems name it
            (``"[[layers]] #2 (summarize)"``, ``"segment 1 (scrub)"``); ``""``: its label.
        parsed: ``False`` for a component that could not be read (its problem is already
            recorded in ``StackSpec.problems``); it is never built.
    """

    kind: Kind
    name: str
    options: dict[str, Any] = attrs.field(factory=dict)
    url: str | None = None
    base_dir: Path | None = None
    url_options: frozenset[str] = frozenset()
    where: str = ""
    parsed: bool = True

    @property
    def label(self) -> str:
        """``layer 'scrub'``: how errors name this component."""
        return f"{_SINGULAR[self.kind]} {self.name!r}"

    @property
    def place(self) -> str:
        """Where it is written (:attr:`where`, else :attr:`label`)."""
        return self.where or self.label

    def __repr__(self) -> str:
        url = f", url={redact_url(self.url)!r}" if self.url else ""
        text = (
            f"ComponentSpec(kind={self.kind!r}, name={self.name!r}, "
            f"options={redact_options(self._plain_options())!r}{url})"
        )
        return redact_text(text, self.secrets())  # also secrets inside JSON option values

    def _plain_options(self) -> dict[str, Any]:
        return {
            k: (v._plain_options() | {"type": v.name} if isinstance(v, ComponentSpec) else v)
            for k, v in self.options.items()
        }

    def secrets(self) -> set[str]:
        """Every secret string this spec holds (URL passwords, sensitive option values)."""
        found = secrets_of_url(self.url) if self.url else set()
        found |= secrets_of_options(self._plain_options())
        return found


@attrs.define
class StackSpec:
    """A whole stack before it is built: the base store and the layers, outermost first.

    Attributes:
        store: the base store.
        layers: the layers, outermost first.
        source: where it came from, redacted (``"URL summarize::sqlite:///x.db"``).
        problems: mistakes found while parsing and not raised yet (``defer=True``):
            building reports them together with its own and constructs nothing.
    """

    store: ComponentSpec
    layers: list[ComponentSpec] = attrs.field(factory=list)
    source: str = "dict"
    problems: list[Problem] = attrs.field(factory=list)

    def secrets(self) -> set[str]:
        """Every secret string of the stack (redacted from every message)."""
        found = self.store.secrets()
        for layer in self.layers:
            found |= layer.secrets()
        return found


def component_from_table(
    kind: Kind,
    data: Any,
    where: str,
    base_dir: Path | None,
    *,
    place: str = "",
    problems: Problems | None = None,
) -> ComponentSpec:
    """A component given as a bare name or as a table ``{"type": NAME, **options}`` (nested
    components inside are parsed too).

    Args:
        kind: the registry kind.
        data: the name or the table.
        where: how errors name it (``"layers[0]"``).
        base_dir: the directory ``*_file`` options are relative to.
        place: its :attr:`ComponentSpec.where` (a ``" (NAME)"`` is added).
        problems: where a broken nested component is recorded (it is then kept as a
            component with ``parsed=False``); ``None``: raise.

    Raises:
        ConfigError: ``data`` is neither, or has no ``type`` (also a nested one, without
            ``problems``).
    """
    if isinstance(data, str):
        return ComponentSpec(kind, data, {}, base_dir=base_dir, where=_named(place, data))
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a table with 'type' or a name")
    options = dict(data)
    name = options.pop("type", None)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where} needs 'type' (a {_SINGULAR[kind]} name)")
    place = _named(place, name)
    options = nest_tables(options, f"{where} ({name})", base_dir, place=place, problems=problems)
    return ComponentSpec(kind, name, options, base_dir=base_dir, where=place)


def _named(place: str, name: str) -> str:
    return f"{place} ({name})" if place else ""


def nest_tables(
    options: dict[str, Any],
    where: str,
    base_dir: Path | None,
    *,
    place: str = "",
    problems: Problems | None = None,
) -> dict[str, Any]:
    """``options`` with each nested component (:data:`NESTED`) given as a name or a table
    replaced by its ``ComponentSpec`` (in place; returned for convenience).

    ``place`` is the owner's :attr:`ComponentSpec.where` (``"[[layers]] #1 (summarize)"``):
    a nested one is ``"[[layers]] #1 (summarize), [layers.summarizer] (litellm)"``.

    Raises:
        ConfigError: a nested component is malformed (without ``problems``; with them it is
            recorded there).
    """
    table = "store" if place.startswith("[store]") else "layers"
    for key, kind in NESTED.items():
        value = options.get(key)
        if not isinstance(value, str | Mapping):
            continue
        inner = f"{place}, [{table}.{key}]" if place else ""
        try:
            options[key] = component_from_table(
                kind, value, f"{where}.{key}", base_dir, place=inner, problems=problems
            )
        except ConfigError as exc:
            if problems is None:
                raise
            problems.add(inner or where, exc)
            options[key] = ComponentSpec(kind, "", base_dir=base_dir, where=inner, parsed=False)
    return options
