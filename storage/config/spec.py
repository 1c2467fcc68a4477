"""The parsed form of a stack: ``StackSpec`` (a store and layers) of ``ComponentSpec``.

What :mod:`storage.config.parse` makes of a URL chain, a dict or a TOML file, and what
:mod:`storage.config.resolve` plans from. Nothing is looked up yet: names are not resolved,
option values are raw (strings from a URL, native values from TOML), ``X_env`` options and a
store's ``url_env`` are not read. A spec's repr never shows a secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from storage.config.problems import Problem
from storage.config.registry import Kind
from storage.redact import (
    redact_options,
    redact_text,
    redact_url,
    secrets_of_options,
    secrets_of_url,
)

__all__ = ["NESTED", "SINGULAR", "ComponentSpec", "StackSpec"]

# Options that are themselves components, built from the named registry kind.
NESTED: Final[Mapping[str, Kind]] = {"summarizer": "summarizers"}
SINGULAR: Final[Mapping[Kind, str]] = {
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
        url_env: the environment variable holding the store URL (a ``[store]`` table's
            ``url_env``), read when the stack is resolved; ``name`` is then the table's
            ``type`` or ``""``.
        type_given: the ``type`` a ``[store]`` table gives beside its ``url`` (resolving
            checks that it names the same store as the URL's scheme).
        base_dir: directory that ``*_file`` options are relative to (the config file's).
        url_options: the names of ``options`` that came from the URL's query (those the
            store does not declare stay in the URL for the store; others are refused).
        where: where it is written, as errors listing several problems name it
            (``"[[layers]] #2 (summarize)"``, ``"segment 1 (scrub)"``); ``""``: its label.
        parsed: ``False`` for a component that could not be read (its problem is already
            recorded in ``StackSpec.problems``); it is never built.

    A nested component (``options["summarizer"]``) is a ``ComponentSpec`` too.
    """

    kind: Kind
    name: str
    options: dict[str, Any] = attrs.field(factory=dict)
    url: str | None = None
    url_env: Any = None
    type_given: Any = None
    base_dir: Path | None = None
    url_options: frozenset[str] = frozenset()
    where: str = ""
    parsed: bool = True

    @property
    def label(self) -> str:
        """``layer 'scrub'``: how errors name this component."""
        return f"{SINGULAR[self.kind]} {self.name!r}"

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
        problems: the mistakes parsing found: :func:`storage.config.open_storage` reports
            them together with those resolving finds, and constructs nothing.
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
